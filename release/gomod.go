package release

import (
	"fmt"

	"golang.org/x/mod/modfile"

	kos "github.com/kos-sdn/kos"
)

// Modules returns the versions of the Go modules the go.mod data requires,
// by module path (replacements applied).
func Modules(gomod []byte) (map[string]string, error) {
	f, err := modfile.ParseLax("go.mod", gomod, nil)
	if err != nil {
		return nil, fmt.Errorf("reading the module's versions: %w", err)
	}
	out := map[string]string{}
	for _, r := range f.Require {
		out[r.Mod.Path] = r.Mod.Version
	}
	for _, r := range f.Replace {
		if _, ok := out[r.Old.Path]; ok && r.New.Version != "" {
			out[r.Old.Path] = r.New.Version
		}
	}
	return out, nil
}

// KOSModules returns the versions of the Go modules of KOS's go.mod, built
// into the binary.
func KOSModules() (map[string]string, error) {
	return Modules(kos.GoMod)
}
