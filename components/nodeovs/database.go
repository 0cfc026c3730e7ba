package nodeovs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"k8s.io/klog/v2"
)

// ensureDatabase makes the database at db match schema: it creates it when
// missing and converts it when the schema changed (a new Open vSwitch in a
// new image), keeping its bridges and ports. It returns what it did:
// "created", "converted" or "kept".
func ensureDatabase(ctx context.Context, tool, db, schema string) (string, error) {
	if _, err := os.Stat(schema); err != nil {
		return "", fmt.Errorf("reading the database schema: %w", err)
	}
	if _, err := os.Stat(db); errors.Is(err, fs.ErrNotExist) {
		if _, err := run(ctx, nil, tool, "create", db, schema); err != nil {
			return "", fmt.Errorf("creating the database: %w", err)
		}
		klog.InfoS("Created the database", "db", db, "schema", schema)
		return "created", nil
	} else if err != nil {
		return "", fmt.Errorf("reading the database: %w", err)
	}
	needs, err := run(ctx, nil, tool, "needs-conversion", db, schema)
	if err != nil {
		return "", fmt.Errorf("checking the database against the schema: %w", err)
	}
	if needs != "yes" {
		return "kept", nil
	}
	if _, err := run(ctx, nil, tool, "convert", db, schema); err != nil {
		return "", fmt.Errorf("converting the database to the schema: %w", err)
	}
	klog.InfoS("Converted the database", "db", db, "schema", schema)
	return "converted", nil
}
