package cluster

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestMountPointsUnderALink finds the mounts under a directory named
// through a symbolic link, as a node's folder is when the checkout's .cache
// links elsewhere: the mount table names them by their resolved paths.
func TestMountPointsUnderALink(t *testing.T) {
	link := filepath.Join(t.TempDir(), "proc")
	if err := os.Symlink("/proc", link); err != nil {
		t.Fatal(err)
	}
	got, err := mountPointsUnder(link)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, "/proc") {
		t.Errorf("mountPointsUnder(%s) = %q, want /proc among them", link, got)
	}
	if len(got) > 1 && len(got[0]) < len(got[len(got)-1]) {
		t.Errorf("mountPointsUnder(%s) = %q, want the deepest first", link, got)
	}
}
