package catalog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/blang/semver/v4"

	"github.com/kos-sdn/kos/channels"
)

// AddonIndex is the file of each addon folder that lists its releases.
const AddonIndex = "addon.yaml"

// AddonVersions reads the index of every addon folder in dir (the
// repository's addons/) and returns, for each of Components, the version of
// the newest release of the addon of that name, whichever folder lists it:
// the version the newest manifests tag their images with.
func AddonVersions(dir string) (map[string]string, error) {
	releases, err := LoadAddons(dir)
	if err != nil {
		return nil, err
	}
	newest := map[string]*semver.Version{}
	for _, r := range releases {
		if r.Version == nil {
			continue
		}
		if v, ok := newest[r.Name]; !ok || r.Version.GT(*v) {
			newest[r.Name] = r.Version
		}
	}
	versions := map[string]string{}
	var errs []error
	for _, name := range Components {
		v, ok := newest[name]
		if !ok {
			errs = append(errs, fmt.Errorf("no versioned release of addon %s in %s", name, dir))
			continue
		}
		versions[name] = v.String()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return versions, nil
}

// LoadAddons reads every dir/*/addon.yaml and returns their releases, with
// manifest locations resolved against each index.
func LoadAddons(dir string) ([]*channels.Addon, error) {
	indexes, err := filepath.Glob(filepath.Join(dir, "*", AddonIndex))
	if err != nil {
		return nil, fmt.Errorf("listing the addons in %s: %w", dir, err)
	}
	if len(indexes) == 0 {
		return nil, fmt.Errorf("no addons in %s: no */%s", dir, AddonIndex)
	}
	var releases []*channels.Addon
	for _, index := range indexes {
		data, err := os.ReadFile(index)
		if err != nil {
			return nil, fmt.Errorf("reading the addon index: %w", err)
		}
		got, err := channels.Parse(index, data)
		if err != nil {
			return nil, err
		}
		releases = append(releases, got...)
	}
	return releases, nil
}
