package catalog

import (
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/tools/images"
)

func TestAddonVersions(t *testing.T) {
	tests := []struct {
		name    string
		dir     string
		want    map[string]string
		wantErr []string
	}{
		{
			name: "newest of every folder",
			dir:  "testdata/addons",
			want: map[string]string{
				APIServer:         "0.10.0",
				ControllerManager: "1.2.0",
				Agent:             "0.3.0-rc.1",
			},
		},
		{
			name:    "an addon missing",
			dir:     "testdata/missing",
			wantErr: []string{"no versioned release of addon kos-apiserver", "no versioned release of addon kos-controller-manager"},
		},
		{
			name:    "no addons",
			dir:     "testdata/none",
			wantErr: []string{"no addons in testdata/none"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AddonVersions(tt.dir)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("got %v, want an error", got)
				}
				for _, want := range tt.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("versions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTags(t *testing.T) {
	got := Tags(map[string]string{APIServer: "0.1.0", ControllerManager: "0.2.0", Agent: "0.3.0"}, "3.6.4")
	want := []string{
		"kos.example.com/etcd:3.6.4",
		"kos.example.com/kos-agent:0.3.0",
		"kos.example.com/kos-apiserver:0.1.0",
		"kos.example.com/kos-controller-manager:0.2.0",
		images.PauseTag,
	}
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tags (-want +got):\n%s", diff)
	}
}

func TestSpec(t *testing.T) {
	for _, name := range Components {
		spec, err := Spec(name)
		if err != nil {
			t.Fatal(err)
		}
		programs, err := spec.Programs()
		if err != nil {
			t.Fatal(err)
		}
		if want := path.Join(images.BinDir, name); programs[0] != want {
			t.Errorf("image %s: entrypoint %s, want %s", name, programs[0], want)
		}
	}
	if _, err := Spec("kube-apiserver"); err == nil || !strings.Contains(err.Error(), `no component image "kube-apiserver"`) {
		t.Errorf("Spec of an unknown image: got %v", err)
	}
}
