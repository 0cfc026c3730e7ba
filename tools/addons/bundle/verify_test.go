package bundle

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/tools/reporoot"
)

func TestVerify(t *testing.T) {
	tests := []struct {
		name string
		// change breaks the generated tree.
		change func(t *testing.T, root string)
		// want are substrings of the problems, one per problem.
		want []string
	}{
		{
			name:   "consistent",
			change: func(*testing.T, string) {},
		},
		{
			name: "released manifest edited in place",
			change: func(t *testing.T, root string) {
				writeFile(t, root, "addons/alpha/1.0.0.yaml", configMap("alpha", "edited"))
			},
			want: []string{"addons/alpha/1.0.0.yaml changed after release alpha 1.0.0 (k8s-1.29) was made"},
		},
		{
			name: "hash missing",
			change: func(t *testing.T, root string) {
				writeFile(t, root, "addons/alpha/addon.yaml", removeHashes(readFile(t, root, "addons/alpha/addon.yaml")))
			},
			want: []string{
				"addons/alpha/addon.yaml: release alpha 1.0.0 (k8s-1.29) has no manifestHash: run make addons",
				"main-channel.yaml is out of date with addons/*/addon.yaml: run make addons",
			},
		},
		{
			name: "channel file edited by hand",
			change: func(t *testing.T, root string) {
				writeFile(t, root, "main-channel.yaml", strings.Replace(readFile(t, root, "main-channel.yaml"), "version: 1.0.0", "version: 1.0.1", 1))
			},
			want: []string{"main-channel.yaml is out of date with addons/*/addon.yaml: run make addons"},
		},
		{
			name: "index does not load",
			change: func(t *testing.T, root string) {
				writeFile(t, root, "addons/beta-alt/addon.yaml", strings.Replace(readFile(t, root, "addons/beta-alt/addon.yaml"), "version: 1.0.0", "version: one", 1))
			},
			want: []string{
				"addons/beta-alt/addon.yaml does not load with channels: ",
				"addons/alt-channel.yaml cannot be made: ",
			},
		},
		{
			name: "stray manifest",
			change: func(t *testing.T, root string) {
				writeFile(t, root, "addons/alpha/2.0.0.yaml", configMap("alpha", "two"))
			},
			want: []string{"addons/alpha/2.0.0.yaml is the manifest of no release: list it in addons/alpha/addon.yaml or delete it"},
		},
		{
			name: "folder in no channel",
			change: func(t *testing.T, root string) {
				writeFile(t, root, "addons/gamma/addon.yaml", "kind: Addons\nmetadata:\n  name: gamma\nspec:\n  addons:\n  - version: 1.0.0\n    kubernetesVersion: \">=1.29.0\"\n    id: k8s-1.29\n    manifest: 1.0.0.yaml\n    manifestHash: "+hashOf(configMap("gamma", "x"))+"\n    selector:\n      addon: gamma\n")
				writeFile(t, root, "addons/gamma/1.0.0.yaml", configMap("gamma", "x"))
			},
			want: []string{"addons/gamma is in no channel file: add it to Channels in tools/addons/bundle/bundle.go"},
		},
		{
			name: "overlapping ranges",
			change: func(t *testing.T, root string) {
				index := strings.Replace(readFile(t, root, "addons/beta/addon.yaml"), `">=1.29.0 <1.30.0"`, `">=1.29.0 <1.31.0"`, 1)
				writeFile(t, root, "addons/beta/addon.yaml", index)
				regenerateLinting(t, root, "beta: tie: ")
			},
			want: []string{
				"main-channel.yaml: releases beta 1.0.0 (k8s-1.29) and beta 1.0.0 (k8s-1.30) both fit Kubernetes 1.30.0: make their kubernetesVersion ranges disjoint",
				"channels lint main-channel.yaml: beta: tie: 1.0.0 (k8s-1.29, >=1.29.0 <1.31.0) of main-channel.yaml and 1.0.0 (k8s-1.30, >=1.30.0) of main-channel.yaml have the same version and both fit Kubernetes 1.30.0",
			},
		},
		{
			name: "an old open-ended range outlives a new capped one",
			change: func(t *testing.T, root string) {
				writeFile(t, root, "addons/alpha/1.1.0.yaml", configMap("alpha", "one-one"))
				writeFile(t, root, "addons/alpha/addon.yaml", readFile(t, root, "addons/alpha/addon.yaml")+`  - name: alpha
    version: 1.1.0
    kubernetesVersion: ">=1.29.0 <1.38.0"
    id: k8s-1.29
    manifest: 1.1.0.yaml
    selector:
      addon: alpha
    namespace: example-com
`)
				regenerateLinting(t, root, "alpha: downgrade: ")
			},
			want: []string{"channels lint main-channel.yaml: alpha: downgrade: on Kubernetes 1.38.0 channels and kOps's channels choose 1.0.0 (k8s-1.29, >=1.29.0) of main-channel.yaml, older than 1.1.0 (k8s-1.29, >=1.29.0 <1.38.0) of main-channel.yaml"},
		},
		{
			name: "object without the selector's labels",
			change: func(t *testing.T, root string) {
				index := strings.Replace(readFile(t, root, "addons/alpha/addon.yaml"), "      addon: alpha\n", "      addon: alpha\n      tier: one\n", 1)
				writeFile(t, root, "addons/alpha/addon.yaml", index)
				regenerate(t, root)
			},
			want: []string{"addons/alpha/1.0.0.yaml: ConfigMap example-com/alpha lacks the labels of the selector of release alpha 1.0.0 (k8s-1.29) (addon=alpha,tier=one): add them"},
		},
		{
			name: "selectors differ across releases",
			change: func(t *testing.T, root string) {
				writeFile(t, root, "addons/beta-alt/1.0.0.yaml", strings.ReplaceAll(configMap("beta", "alt"), "addon: beta", "addon: beta-alt"))
				index := readFile(t, root, "addons/beta-alt/addon.yaml")
				index = strings.Replace(index, "      addon: beta\n", "      addon: beta-alt\n", 1)
				index = removeHashes(index)
				writeFile(t, root, "addons/beta-alt/addon.yaml", index)
				regenerate(t, root)
			},
			want: []string{"addon beta has the selector addon=beta in addons/beta/addon.yaml but addon=beta-alt in addons/beta-alt/addon.yaml (release beta 1.0.0 (k8s-1.29-alt)): give every release of an addon the same selector"},
		},
		{
			name: "alternative missing a version",
			change: func(t *testing.T, root string) {
				writeFile(t, root, "addons/alpha/1.1.0.yaml", configMap("alpha", "one-one"))
				index := readFile(t, root, "addons/alpha/addon.yaml") + `  - name: alpha
    version: 1.1.0
    kubernetesVersion: ">=1.29.0"
    id: k8s-1.29
    manifest: 1.1.0.yaml
    selector:
      addon: alpha
    namespace: example-com
`
				writeFile(t, root, "addons/alpha/addon.yaml", index)
				writeFile(t, root, "addons/beta/2.0.0.yaml", configMap("beta", "two"))
				index = readFile(t, root, "addons/beta/addon.yaml") + `  - version: 2.0.0
    kubernetesVersion: ">=1.29.0"
    id: k8s-1.29
    manifest: 2.0.0.yaml
    selector:
      addon: beta
`
				writeFile(t, root, "addons/beta/addon.yaml", index)
				regenerate(t, root)
			},
			want: []string{"addon beta 2.0.0 is in main-channel.yaml but not in addons/alt-channel.yaml: release that version in both"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := generatedTree(t)
			tt.change(t, root)
			problems, err := Verify(context.Background(), root, testChannels, nil)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			checkProblems(t, problems, tt.want)
		})
	}
}

func TestVerifyHistory(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, root string)
		want   []string
	}{
		{
			name:   "unchanged",
			change: func(*testing.T, string) {},
		},
		{
			name: "released manifest and its hash changed together",
			change: func(t *testing.T, root string) {
				writeFile(t, root, "addons/alpha/1.0.0.yaml", configMap("alpha", "edited"))
				writeFile(t, root, "addons/alpha/addon.yaml", removeHashes(readFile(t, root, "addons/alpha/addon.yaml")))
				regenerate(t, root)
			},
			want: []string{"addons/alpha/addon.yaml: release alpha 1.0.0 (k8s-1.29) changed since BASE (manifest addons/alpha/1.0.0.yaml, manifestHash 8dff51b037f5c0ca45af17516bc51ff2a7e02c2a448b276e1b521a9028b14556; now addons/alpha/1.0.0.yaml, "},
		},
		{
			name: "release removed",
			change: func(t *testing.T, root string) {
				index := readFile(t, root, "addons/beta/addon.yaml")
				index = index[:strings.Index(index, "  - version: 1.0.0\n")]
				writeFile(t, root, "addons/beta/addon.yaml", index)
				if err := os.Remove(filepath.Join(root, "addons/beta/1.0.0-k8s-1.30.yaml")); err != nil {
					t.Fatal(err)
				}
				regenerate(t, root)
			},
			want: []string{"addons/beta/addon.yaml: release beta 1.0.0 (k8s-1.30), listed at BASE, is gone: every released version stays listed"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := generatedTree(t)
			released := map[string]string{}
			for _, path := range []string{"addons/alpha/addon.yaml", "addons/beta/addon.yaml", "addons/beta-alt/addon.yaml"} {
				released[path] = readFile(t, root, path)
			}
			base := &Base{Name: "BASE", Read: func(path string) ([]byte, bool, error) {
				data, ok := released[path]
				return []byte(data), ok, nil
			}}
			tt.change(t, root)
			problems, err := Verify(context.Background(), root, testChannels, base)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			checkProblems(t, problems, tt.want)
		})
	}
}

// TestRepositoryBundle checks the KOS bundle itself, against the last
// commit: every addon.yaml and channel file loads with channels, every hash
// matches, the channel files are up to date, and no release committed
// before changed.
func TestRepositoryBundle(t *testing.T) {
	root, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	base, err := GitBase(root, "HEAD")
	if err != nil {
		t.Fatalf("GitBase: %v", err)
	}
	problems, err := Verify(context.Background(), root, Channels, base)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	for _, p := range problems {
		t.Errorf("%s", p)
	}
}

// checkProblems compares problems with substrings of them, in order.
func checkProblems(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
		return
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("problem %d is\n  %s\nwant it to contain\n  %s", i, got[i], want[i])
		}
	}
}

func regenerate(t *testing.T, root string) {
	t.Helper()
	if _, err := Generate(context.Background(), root, testChannels); err != nil {
		t.Fatalf("Generate: %v", err)
	}
}

// regenerateLinting is regenerate for a tree channels lint refuses: the
// files are written all the same, and Generate's error says why.
func regenerateLinting(t *testing.T, root, want string) {
	t.Helper()
	if _, err := Generate(context.Background(), root, testChannels); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Generate: %v, want an error saying %q", err, want)
	}
}

func removeHashes(index string) string {
	var kept []string
	for _, line := range strings.SplitAfter(index, "\n") {
		if !strings.Contains(line, "manifestHash:") {
			kept = append(kept, line)
		}
	}
	return strings.Join(kept, "")
}

func hashOf(s string) string {
	return channels.HashManifest([]byte(s))
}
