package channel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/channels/api"
)

// FuzzParse feeds arbitrary bytes to the channel parser. It must never
// panic; what it accepts must be whole (every release named, with an
// absolute-resolved manifest and a record namespace); a plain manifest's hash
// is its content's; and a channel it accepts, written back as YAML, parses
// to the same releases.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.yaml")
	more, _ := filepath.Glob("testdata/bad/*.yaml")
	addons, _ := filepath.Glob("../../addons/*/addon.yaml")
	seeds = append(append(append(seeds, more...), addons...), "../../bootstrap-channel.yaml", "../../addons/local-channel.yaml")
	for _, path := range seeds {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatalf("reading seed: %v", err)
		}
		f.Add("s3://bucket/kos/channel.yaml", data)
		f.Add("/srv/channels/"+filepath.Base(path), data)
	}
	f.Add("https://example.com/c.yaml", []byte("kind: Addons\nmetadata:\n  name: x\nspec:\n  addons:\n  - version: \"1.6\"\n    manifest: a:b.yaml\n    selector: {k: v}\n"))
	f.Add("c.yaml", []byte("kind: Addons\nspec:\n  addons:\n  - null\n"))
	f.Add("c.yaml", []byte("---\n# only a comment\n---\n"))

	f.Fuzz(func(t *testing.T, location string, data []byte) {
		addons, err := Parse(location, data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		for _, a := range addons {
			if a.Name == "" || a.Namespace == "" || a.Manifest == "" || a.Channel != location {
				t.Fatalf("incomplete release %+v", a)
			}
			if a.Inline != nil && a.ManifestHash != HashManifest(data) {
				t.Fatalf("plain manifest hash %s, want %s", a.ManifestHash, HashManifest(data))
			}
		}
		if len(addons) == 1 && addons[0].Inline != nil {
			return // a plain manifest has no channel to write back
		}
		docs, err := splitDocuments(data)
		if err != nil || len(docs) != 1 {
			t.Fatalf("accepted channel has %d documents (%v)", len(docs), err)
		}
		channel, problems := decodeChannel(docs[0])
		if channel == nil || len(problems) > 0 {
			t.Fatalf("accepted channel decodes with problems %v", problems)
		}
		channel.Kind = api.Kind
		out, err := yaml.Marshal(channel)
		if err != nil {
			t.Fatalf("writing the channel back: %v", err)
		}
		again, err := Parse(location, out)
		if err != nil {
			t.Fatalf("channel written back does not parse: %v\n%s", err, out)
		}
		if diff := cmp.Diff(addons, again); diff != "" {
			t.Fatalf("channel written back parses differently (-first +again):\n%s\n%s", diff, out)
		}
		if strings.TrimSpace(string(out)) == "" {
			t.Fatal("channel written back is empty")
		}
	})
}
