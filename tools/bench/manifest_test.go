package bench

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestManifest(t *testing.T) {
	docs := strings.Split(string(Manifest("bench-x", 200, 150)), "\n---\n")
	if got, want := len(docs), 150; got != want {
		t.Fatalf("documents: got %d, want %d", got, want)
	}
	kinds := map[string]int{}
	for i, d := range docs {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Namespace string            `json:"namespace"`
				Labels    map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(d), &obj); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if got := obj.Metadata.Labels[SelectorKey]; got != "bench-x" {
			t.Errorf("document %d (%s): label %s = %q, want bench-x", i, obj.Kind, SelectorKey, got)
		}
		kinds[obj.Kind]++
	}
	if len(kinds) != 8 {
		t.Errorf("kinds: got %v, want Namespace and seven others", kinds)
	}
}
