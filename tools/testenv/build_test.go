package testenv

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestBuild builds a small command of the module twice: under Main the
// second call finds the first's binary.
func TestBuild(t *testing.T) {
	first := Build(t, "tools/images/pause")
	info, err := os.Stat(first)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode()&0o111 == 0 {
		t.Errorf("%s has mode %s, want it executable", first, info.Mode())
	}
	if again := Build(t, "./tools/images/pause"); again != first {
		t.Errorf("the second Build gave %s, want the first's %s", again, first)
	}
}

// TestSharedBuild builds a small command into a folder shared between test
// programs: a caller waits while another program holds the command's lock;
// four callers at once, each with a lock file of its own as another program
// has, all get the same binary, which a later caller finds rather than
// building again.
func TestSharedBuild(t *testing.T) {
	shared := t.TempDir()
	const pkg = "tools/images/pause"

	if err := os.MkdirAll(filepath.Join(shared, "tools", "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	held, err := os.OpenFile(filepath.Join(shared, filepath.FromSlash(pkg))+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := sharedBuild(t.Context(), shared, pkg)
		waited <- err
	}()
	select {
	case err := <-waited:
		t.Fatalf("sharedBuild returned (%v) while another program held the lock", err)
	case <-time.After(time.Second):
	}
	held.Close()
	if err := <-waited; err != nil {
		t.Fatalf("after the lock was released: %v", err)
	}

	shared = t.TempDir()
	bins := make([]string, 4)
	errs := make([]error, len(bins))
	var wg sync.WaitGroup
	for i := range bins {
		wg.Go(func() { bins[i], errs[i] = sharedBuild(t.Context(), shared, pkg) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
		if bins[i] != bins[0] {
			t.Errorf("caller %d got %s, caller 0 %s: want one binary", i, bins[i], bins[0])
		}
	}
	built, err := os.Stat(bins[0])
	if err != nil {
		t.Fatal(err)
	}
	if built.Mode()&0o111 == 0 {
		t.Errorf("%s has mode %s, want it executable", bins[0], built.Mode())
	}
	entries, err := os.ReadDir(filepath.Dir(bins[0]))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != filepath.Base(bins[0]) {
		t.Errorf("the command's folder holds %v, want only %s", entries, filepath.Base(bins[0]))
	}
	// A rebuild would write the file again.
	old := built.ModTime().Add(-time.Hour)
	if err := os.Chtimes(bins[0], old, old); err != nil {
		t.Fatal(err)
	}
	again, err := sharedBuild(t.Context(), shared, pkg)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(again)
	if err != nil {
		t.Fatal(err)
	}
	if again != bins[0] || !info.ModTime().Equal(old) {
		t.Errorf("a later caller got %s modified %s, want %s left as it was (%s)", again, info.ModTime(), bins[0], old)
	}
}

func TestModulePackage(t *testing.T) {
	tests := []struct {
		pkg     string
		want    string
		wantErr bool
	}{
		{pkg: "cmd/channels", want: "cmd/channels"},
		{pkg: "./cmd/channels/", want: "cmd/channels"},
		{pkg: "tools/../cmd/kos-agent", want: "cmd/kos-agent"},
		{pkg: ".", wantErr: true},
		{pkg: "../other/cmd", wantErr: true},
		{pkg: "/usr/bin", wantErr: true},
	}
	for _, tt := range tests {
		got, err := modulePackage(tt.pkg)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("modulePackage(%q) = %q, %v; want %q, error %t", tt.pkg, got, err, tt.want, tt.wantErr)
		}
	}
}
