package reporoot

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFind finds the checkout from this package's folder, and from the
// working directory alone when the source path says nothing (a -trimpath
// build), and fails outside any checkout.
func TestFind(t *testing.T) {
	root, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	if !declaresModule(root) {
		t.Fatalf("Find() = %s, which holds no go.mod of %s", root, ModulePath)
	}
	if _, err := os.Stat(filepath.Join(root, "tools", "reporoot", "reporoot.go")); err != nil {
		t.Fatalf("Find() = %s, which is not this checkout: %v", root, err)
	}

	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "go.mod"), []byte("module example.com/other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if declaresModule(other) {
		t.Errorf("a go.mod of example.com/other declares %s", ModulePath)
	}
	t.Chdir(other)
	if got, err := Find(); err == nil && got != root {
		t.Errorf("from %s, Find() = %s; want %s (the source path) or an error", other, got, root)
	}
}
