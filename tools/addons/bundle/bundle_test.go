package bundle

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// testChannels are the channel files of the tree writeTree makes.
var testChannels = []Channel{
	{Path: "main-channel.yaml", Name: "main", Comment: []string{"The main channel."}, Folders: []string{"alpha", "beta"}},
	{Path: "addons/alt-channel.yaml", Name: "alt", Comment: []string{"The alternatives."}, Folders: []string{"beta-alt"}},
}

// testTree is a small, consistent bundle without hashes: alpha with one
// release, beta with two Kubernetes variants, and beta-alt with an
// alternative release of beta.
var testTree = map[string]string{
	"addons/alpha/addon.yaml": `# alpha's releases.
kind: Addons
metadata:
  name: alpha
spec:
  addons:
  # The first.
  - name: alpha
    version: 1.0.0
    kubernetesVersion: ">=1.29.0"
    id: k8s-1.29
    manifest: 1.0.0.yaml
    selector:
      addon: alpha
    namespace: example-com
`,
	"addons/alpha/1.0.0.yaml": configMap("alpha", "one"),
	"addons/beta/addon.yaml": `kind: Addons
metadata:
  name: beta
spec:
  addons:
  - manifest: "1.0.0-k8s-1.29.yaml"
    version: 1.0.0
    kubernetesVersion: ">=1.29.0 <1.30.0"
    id: k8s-1.29
    selector:
      addon: beta
  - version: 1.0.0
    kubernetesVersion: ">=1.30.0"
    id: k8s-1.30
    manifest: 1.0.0-k8s-1.30.yaml
    selector:
      addon: beta
`,
	"addons/beta/1.0.0-k8s-1.29.yaml": configMap("beta", "old"),
	"addons/beta/1.0.0-k8s-1.30.yaml": configMap("beta", "new"),
	"addons/beta-alt/addon.yaml": `kind: Addons
metadata:
  name: beta-alt
spec:
  addons:
  - name: beta
    version: 1.0.0
    kubernetesVersion: ">=1.29.0"
    id: k8s-1.29-alt
    manifest: 1.0.0.yaml
    selector:
      addon: beta
`,
	"addons/beta-alt/1.0.0.yaml": configMap("beta", "alt"),
}

func configMap(addon, value string) string {
	return `apiVersion: v1
kind: ConfigMap
metadata:
  name: ` + addon + `
  namespace: example-com
  labels:
    addon: ` + addon + `
data:
  value: ` + value + `
`
}

// writeTree writes files under a new folder and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for path, content := range files {
		writeFile(t, root, path, content)
	}
	return root
}

func writeFile(t *testing.T, root, path, content string) {
	t.Helper()
	full := filepath.Join(root, filepath.FromSlash(path))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, root, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// generatedTree is testTree after Generate: hashes filled in and the channel
// files written.
func generatedTree(t *testing.T) string {
	t.Helper()
	root := writeTree(t, testTree)
	if _, err := Generate(context.Background(), root, testChannels); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return root
}

func TestGenerate(t *testing.T) {
	ctx := context.Background()
	root := writeTree(t, testTree)
	changes, err := Generate(ctx, root, testChannels)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	want := []string{
		"addons/alpha/addon.yaml: added the manifestHash of 1.0.0.yaml",
		"addons/beta/addon.yaml: added the manifestHash of 1.0.0-k8s-1.29.yaml",
		"addons/beta/addon.yaml: added the manifestHash of 1.0.0-k8s-1.30.yaml",
		"addons/beta-alt/addon.yaml: added the manifestHash of 1.0.0.yaml",
		"wrote main-channel.yaml",
		"wrote addons/alt-channel.yaml",
	}
	if diff := cmp.Diff(want, changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	for _, path := range []string{"addons/alpha/addon.yaml", "addons/beta/addon.yaml", "main-channel.yaml", "addons/alt-channel.yaml"} {
		golden := filepath.Join("testdata", strings.ReplaceAll(path, "/", "_"))
		if diff := cmp.Diff(readGolden(t, golden), readFile(t, root, path)); diff != "" {
			t.Errorf("%s differs from %s (-want +got):\n%s", path, golden, diff)
		}
	}

	changes, err = Generate(ctx, root, testChannels)
	if err != nil {
		t.Fatalf("Generate again: %v", err)
	}
	if len(changes) != 0 {
		t.Errorf("Generate again changed %q, want nothing", changes)
	}
}

func TestGenerateKeepsHashes(t *testing.T) {
	root := generatedTree(t)
	// A released manifest edited in place: its hash must stay, so that
	// verify catches the edit.
	index := readFile(t, root, "addons/alpha/addon.yaml")
	writeFile(t, root, "addons/alpha/1.0.0.yaml", configMap("alpha", "edited"))
	changes, err := Generate(context.Background(), root, testChannels)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if len(changes) != 0 {
		t.Errorf("Generate changed %q, want nothing", changes)
	}
	if got := readFile(t, root, "addons/alpha/addon.yaml"); got != index {
		t.Errorf("Generate rewrote addon.yaml:\n%s\nwant it unchanged:\n%s", got, index)
	}
}

func TestGenerateRefusesUnloadableIndex(t *testing.T) {
	files := copyTree(testTree)
	files["addons/alpha/addon.yaml"] = strings.Replace(files["addons/alpha/addon.yaml"], "    namespace: example-com\n", "    namespace: example-com\n    colour: blue\n", 1)
	root := writeTree(t, files)
	_, err := Generate(context.Background(), root, testChannels)
	if err == nil || !strings.Contains(err.Error(), "addons/alpha/addon.yaml does not load") || !strings.Contains(err.Error(), "colour") {
		t.Errorf("Generate: got error %v, want one naming addons/alpha/addon.yaml and the field colour", err)
	}
}

func readGolden(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the golden file: %v", err)
	}
	return string(data)
}

func copyTree(files map[string]string) map[string]string {
	out := make(map[string]string, len(files))
	for k, v := range files {
		out[k] = v
	}
	return out
}

func TestGenerateKeepsUpgradesFrom(t *testing.T) {
	tree := map[string]string{}
	for k, v := range testTree {
		tree[k] = v
	}
	tree["addons/alpha/addon.yaml"] += `  - name: alpha
    version: 2.0.0
    upgradesFrom: 1.0.0
    kubernetesVersion: ">=1.29.0"
    id: k8s-1.29
    manifest: 2.0.0.yaml
    selector:
      addon: alpha
    namespace: example-com
`
	tree["addons/alpha/2.0.0.yaml"] = configMap("alpha", "two")
	root := writeTree(t, tree)
	if _, err := Generate(context.Background(), root, testChannels); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if got := readFile(t, root, "main-channel.yaml"); !strings.Contains(got, "upgradesFrom: 1.0.0") {
		t.Errorf("main-channel.yaml lost alpha 2.0.0's upgradesFrom:\n%s", got)
	}
}
