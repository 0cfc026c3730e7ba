package bundle

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/channels/api"
)

var (
	// addonsKey is the line that opens spec.addons.
	addonsKey = regexp.MustCompile(`^\s*addons:\s*(#.*)?$`)
	// listItem is the first line of a list item, and its indentation.
	listItem = regexp.MustCompile(`^(\s*)- `)
	// manifestKey is a manifest line, the indentation of its key, and its
	// value.
	manifestKey = regexp.MustCompile(`^(\s*(?:- )?)manifest:\s*(.*?)\s*(#.*)?$`)
	// hashKey is a manifestHash line.
	hashKey = regexp.MustCompile(`^\s*(?:- )?manifestHash:`)
)

// FillHashes adds a manifestHash line, the SHA-256 of the manifest's bytes,
// to every release of the addon.yaml at path that has none, right under its
// manifest line, and leaves everything else of the file as it is, comments
// included. It returns the releases it filled in. A hash that is there is
// never changed.
func FillHashes(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var channel api.Addons
	if err := yaml.Unmarshal(data, &channel); err != nil {
		return nil, fmt.Errorf("%s is not a channel; fix its YAML: %w", path, err)
	}
	missing := 0
	for _, spec := range channel.Spec.Addons {
		if spec != nil && spec.ManifestHash == "" && spec.Manifest != nil {
			missing++
		}
	}
	if missing == 0 {
		return nil, nil
	}

	lines := strings.SplitAfter(string(data), "\n")
	items := entryStarts(lines)
	var out strings.Builder
	var filled []string
	for i, line := range lines {
		out.WriteString(line)
		m := manifestKey.FindStringSubmatch(strings.TrimRight(line, "\r\n"))
		if m == nil || !inEntryWithoutHash(lines, items, i) {
			continue
		}
		manifest := unquote(m[2])
		sum, err := hashFile(filepath.Join(filepath.Dir(path), filepath.FromSlash(manifest)))
		if err != nil {
			return nil, fmt.Errorf("%s: hashing the manifest %s: %w", path, manifest, err)
		}
		indent := strings.Repeat(" ", len(m[1]))
		if !strings.HasSuffix(line, "\n") {
			out.WriteString("\n")
		}
		fmt.Fprintf(&out, "%smanifestHash: %s\n", indent, sum)
		filled = append(filled, manifest)
	}

	// The edit is by lines; make sure it meant what it should.
	got, err := channels.Parse(path, []byte(out.String()))
	if err != nil || len(filled) != missing || countHashes(got) != len(got) {
		return nil, fmt.Errorf("%s: could not add the missing manifestHash lines (is every release a list item under spec.addons with a manifest line?); add them by hand: the hex SHA-256 of each manifest (sha256sum)", path)
	}
	if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	return filled, nil
}

// entryStarts returns, for each line, whether it starts an item of
// spec.addons: the list items indented as the first one after "addons:".
func entryStarts(lines []string) []bool {
	starts := make([]bool, len(lines))
	inAddons, indent := false, -1
	for i, line := range lines {
		if !inAddons {
			inAddons = addonsKey.MatchString(strings.TrimRight(line, "\r\n"))
			continue
		}
		m := listItem.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if indent < 0 {
			indent = len(m[1]) // the first item sets it
		}
		starts[i] = len(m[1]) == indent
	}
	return starts
}

// inEntryWithoutHash reports whether line i belongs to an item of
// spec.addons that has no manifestHash line.
func inEntryWithoutHash(lines []string, starts []bool, i int) bool {
	first := -1
	for j := i; j >= 0; j-- {
		if starts[j] {
			first = j
			break
		}
	}
	if first < 0 {
		return false
	}
	for j := first; j < len(lines); j++ {
		if j > first && starts[j] {
			break
		}
		if hashKey.MatchString(lines[j]) {
			return false
		}
	}
	return true
}

func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
		return v[1 : len(v)-1]
	}
	return v
}

func countHashes(releases []*channels.Addon) int {
	n := 0
	for _, a := range releases {
		if a.ManifestHash != "" {
			n++
		}
	}
	return n
}

func hashFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return channels.HashManifest(data), nil
}

// hasSelector reports whether labels hold every label of selector.
func hasSelector(labels, selector map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
