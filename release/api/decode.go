package api

import (
	"errors"
	"fmt"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Decode reads a release configuration from YAML or JSON and validates it.
// It refuses unknown and duplicate keys (naming their paths) and returns
// every problem of the values at once, as a field.ErrorList joined into one
// error.
func Decode(data []byte) (*ReleaseConfig, error) {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("reading the release configuration: %w", err)
	}
	cfg := &ReleaseConfig{}
	strict, err := kjson.UnmarshalStrict(j, cfg, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("reading the release configuration: %w", err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("reading the release configuration: %w", errors.Join(strict...))
	}
	if errs := Validate(cfg); len(errs) > 0 {
		return nil, fmt.Errorf("the release configuration: %w", errs.ToAggregate())
	}
	return cfg, nil
}
