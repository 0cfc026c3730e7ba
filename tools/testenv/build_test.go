package testenv

import (
	"os"
	"testing"
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
