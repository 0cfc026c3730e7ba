package docrun

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const page = "testdata/page.md"

func TestSection(t *testing.T) {
	tests := []struct {
		heading string
		want    []Block
		wantErr string
	}{
		{
			heading: "## Uninstalling",
			want: []Block{
				{File: page, Heading: "## Uninstalling", Line: 17, Script: "NAME=default   # what the reader sets\necho \"removing $NAME\"\n"},
				{File: page, Heading: "### Nodes", Line: 26, Script: "echo nodes\n  echo indented\n"},
				{File: page, Heading: "### Nodes", Line: 31, Script: "echo '``` inside'\n"},
			},
		},
		{
			heading: "### Nodes",
			want: []Block{
				{File: page, Heading: "### Nodes", Line: 26, Script: "echo nodes\n  echo indented\n"},
				{File: page, Heading: "### Nodes", Line: 31, Script: "echo '``` inside'\n"},
			},
		},
		{heading: "## After", want: []Block{{File: page, Heading: "## After", Line: 37, Script: "echo after\n"}}},
		{heading: "## Empty", wantErr: "no block marked"},
		{heading: "## Missing", wantErr: "no heading"},
		{heading: "Uninstalling", wantErr: "not a Markdown heading"},
	}
	for _, tt := range tests {
		t.Run(tt.heading, func(t *testing.T) {
			t.Parallel()
			got, err := Section(page, tt.heading)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Section: error %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("Section (-got +want):\n%s", diff)
			}
		})
	}
}

func TestSubstitute(t *testing.T) {
	tests := []struct {
		name, script string
		vars         map[string]string
		want         string
		wantAssigned []string
	}{
		{
			name:         "value and comment",
			script:       "IMAGE=kos.example.com/a:0.3.0   # the image\necho $IMAGE\n",
			vars:         map[string]string{"IMAGE": "127.0.0.1:5000/kos/a@sha256:00"},
			want:         "IMAGE=127.0.0.1:5000/kos/a@sha256:00   # the image\necho $IMAGE\n",
			wantAssigned: []string{"IMAGE"},
		},
		{
			name:         "quoted, indented, needing quotes",
			script:       "  DIR=\"/a b\"\n",
			vars:         map[string]string{"DIR": "it's"},
			want:         "  DIR='it'\\''s'\n",
			wantAssigned: []string{"DIR"},
		},
		{
			name:   "other names and uses stay",
			script: "OTHER=1\necho IMAGE=x\nkubectl get pods\n",
			vars:   map[string]string{"IMAGE": "y"},
			want:   "OTHER=1\necho IMAGE=x\nkubectl get pods\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, assigned := Substitute(tt.script, tt.vars)
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("script (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(assigned, tt.wantAssigned); diff != "" {
				t.Errorf("assigned (-got +want):\n%s", diff)
			}
		})
	}
}

// TestRun runs the blocks of the test page with bash and records them.
func TestRun(t *testing.T) {
	records := filepath.Join(t.TempDir(), "docrun.jsonl")
	t.Setenv(Env, records)
	blocks, err := Section(page, "## Uninstalling")
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{Dir: t.TempDir(), Vars: map[string]string{"NAME": "the test's"}, Logf: t.Logf}
	out, err := r.Run(t.Context(), blocks...)
	if err != nil {
		t.Fatal(err)
	}
	if want := "removing the test's\nnodes\nindented\n``` inside\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	data, err := os.ReadFile(records)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var rec Record
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		if !rec.Passed {
			t.Errorf("record %+v: not passed", rec)
		}
		lines = append(lines, rec.Heading)
	}
	if diff := cmp.Diff(lines, []string{"## Uninstalling", "### Nodes", "### Nodes"}); diff != "" {
		t.Errorf("recorded headings (-got +want):\n%s", diff)
	}

	t.Run("a variable the page does not assign", func(t *testing.T) {
		r := &Runner{Dir: t.TempDir(), Vars: map[string]string{"NAME": "x", "GONE": "y"}}
		if _, err := r.Run(t.Context(), blocks...); err == nil || !strings.Contains(err.Error(), "assigns GONE") {
			t.Errorf("Run: error %v, want one naming GONE", err)
		}
	})
	t.Run("a failing block stops the run", func(t *testing.T) {
		failing := []Block{{File: "f.md", Heading: "## F", Line: 3, Script: "false\n"}, {Script: "echo never\n"}}
		out, err := (&Runner{Dir: t.TempDir()}).Run(t.Context(), failing...)
		if err == nil || !strings.Contains(err.Error(), "f.md:3 (## F)") || strings.Contains(out, "never") {
			t.Errorf("Run: %q, error %v; want an error naming f.md:3 and no output of the next block", out, err)
		}
	})
}

func TestAll(t *testing.T) {
	t.Parallel()
	all, err := All(page)
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, m := range all {
		got = append(got, append([]string{m.String()}, m.Headings...))
	}
	want := [][]string{
		{"testdata/page.md:5 (## Installing)", "# A page", "## Installing"},
		{"testdata/page.md:17 (## Uninstalling)", "# A page", "## Uninstalling"},
		{"testdata/page.md:26 (### Nodes)", "# A page", "## Uninstalling", "### Nodes"},
		{"testdata/page.md:31 (### Nodes)", "# A page", "## Uninstalling", "### Nodes"},
		{"testdata/page.md:37 (## After)", "# A page", "## After"},
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("All (-got +want):\n%s", diff)
	}
}
