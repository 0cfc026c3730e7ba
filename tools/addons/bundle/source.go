package bundle

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/kos-sdn/kos/release"
)

// renderer returns a renderer of the repository's addon sources, without a
// configuration, naming its go.mod's module versions; nil when the
// repository has no addons/source.
func renderer(root string) (*release.Renderer, error) {
	if !hasSource(root) {
		return nil, nil
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, fmt.Errorf("reading the module's versions: %w", err)
	}
	modules, err := release.Modules(gomod)
	if err != nil {
		return nil, err
	}
	return release.NewRenderer(os.DirFS(filepath.Join(root, AddonsDir)), nil, modules)
}

// hasSource reports whether the repository at root has addons/source (the
// tests' bundles have none).
func hasSource(root string) bool {
	_, err := os.Stat(filepath.Join(root, AddonsDir, release.SourceDir))
	return !errors.Is(err, fs.ErrNotExist)
}

// renderSource renders every manifest of addons/source into its addon
// folder. While release.Version is not released, a manifest that changes
// loses its manifestHash line (FillHashes then adds the new one); once it
// is, a change is refused: released manifests are immutable.
func renderSource(root string) ([]string, error) {
	r, err := renderer(root)
	if err != nil || r == nil {
		return nil, err
	}
	var changes []string
	for _, t := range release.Targets {
		data, err := r.Render(t)
		if err != nil {
			return changes, err
		}
		rel := path.Join(AddonsDir, t.File())
		file := filepath.Join(root, filepath.FromSlash(rel))
		old, err := os.ReadFile(file)
		if err == nil && bytes.Equal(old, data) {
			continue
		}
		if err == nil && release.Released {
			return changes, fmt.Errorf("%s is released, and addons/%s renders it differently now: release the change as a new version (release.Version in release/source.go)", rel, t.Source)
		}
		if err := os.WriteFile(file, data, 0o644); err != nil {
			return changes, fmt.Errorf("writing %s: %w", rel, err)
		}
		changes = append(changes, "rendered "+rel)
		if _, err := DropHash(filepath.Join(root, AddonsDir, filepath.FromSlash(t.Folder), t.Index), path.Base(t.File())); err != nil {
			return changes, err
		}
	}
	return changes, nil
}

// verifySource checks that every manifest of addons/source is what the
// source renders.
func (v *verifier) verifySource() {
	r, err := renderer(v.b.Root)
	if err != nil {
		v.problemf("rendering addons/source: %v", err)
		return
	}
	if r == nil {
		return
	}
	for _, t := range release.Targets {
		want, err := r.Render(t)
		if err != nil {
			v.problemf("rendering addons/source: %v", err)
			continue
		}
		rel := path.Join(AddonsDir, t.File())
		got, err := os.ReadFile(v.b.Path(rel))
		switch {
		case err != nil:
			v.problemf("%s, which addons/%s renders, cannot be read (%v): run make addons", rel, t.Source, err)
		case !bytes.Equal(got, want):
			v.problemf("%s is not what addons/%s renders: run make addons (never edit a rendered manifest)", rel, t.Source)
		}
	}
}

// DropHash removes the manifestHash line of the release of the index at
// path whose manifest is manifest, and reports whether there was one.
func DropHash(path, manifest string) (bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", path, err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	starts := entryStarts(lines)
	first, last := -1, len(lines)
	for i := range lines {
		if starts[i] {
			if first >= 0 && found(lines[first:i], manifest) {
				last = i
				break
			}
			first = i
		}
	}
	if first < 0 || !found(lines[first:last], manifest) {
		return false, nil
	}
	var out strings.Builder
	dropped := false
	for i, line := range lines {
		if i >= first && i < last && hashKey.MatchString(line) {
			dropped = true
			continue
		}
		out.WriteString(line)
	}
	if !dropped {
		return false, nil
	}
	if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
		return false, fmt.Errorf("writing %s: %w", path, err)
	}
	return true, nil
}

// found reports whether the lines of one entry name manifest.
func found(lines []string, manifest string) bool {
	for _, line := range lines {
		if m := manifestKey.FindStringSubmatch(strings.TrimRight(line, "\r\n")); m != nil && unquote(m[2]) == manifest {
			return true
		}
	}
	return false
}
