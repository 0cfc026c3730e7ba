// Package reporoot finds the KOS checkout that a developer tool or a test
// runs from.
package reporoot

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// ModulePath is the module whose root Find looks for.
const ModulePath = "github.com/kos-sdn/kos"

// Find returns the root folder of the KOS checkout: the folder two levels
// above this package's source when the program was built from a checkout,
// else the nearest folder above the working directory whose go.mod declares
// ModulePath. The second is what a program built with -trimpath (make test
// builds so) finds: its source paths are not file paths, but a test runs in
// its package's folder.
func Find() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
		if declaresModule(root) {
			return root, nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	for {
		if declaresModule(dir) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s above the working directory", ModulePath)
		}
		dir = parent
	}
}

// declaresModule reports whether dir holds a go.mod of ModulePath.
func declaresModule(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if fields := strings.Fields(line); len(fields) == 2 && fields[0] == "module" {
			return fields[1] == ModulePath
		}
	}
	return false
}
