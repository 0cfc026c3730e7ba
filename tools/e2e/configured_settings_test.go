package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/release/api"
)

// How a setting of the configured release is read: from an object of a
// rendered tree or of the cluster, by the table of configured_test.go, with
// the results written as a table.

// singleNodeEtcd is the single-node etcd's manifest, whose StatefulSet
// claims kos-etcd-data instead of having a claim template.
const singleNodeEtcd = "addons/kos-etcd-single-node/0.4.0.yaml"

// podSpecPath is where an object of kind holds its pods' spec.
func podSpecPath(kind string) []string {
	if kind == "CronJob" {
		return []string{"spec", "jobTemplate", "spec", "template", "spec"}
	}
	return []string{"spec", "template", "spec"}
}

// errMissing says that an object lacks the field a check reads.
var errMissing = errors.New("no such field")

// fieldOf reads the field at fields.
func fieldOf(fields ...string) func(map[string]any) (string, error) {
	return func(obj map[string]any) (string, error) {
		v, ok, err := unstructured.NestedFieldNoCopy(obj, fields...)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", errMissing
		}
		return valueString(v), nil
	}
}

// container returns the container or init container name of the pod spec
// at spec.
func container(obj map[string]any, spec []string, name string) (map[string]any, error) {
	for _, list := range []string{"initContainers", "containers"} {
		items, _, err := unstructured.NestedSlice(obj, append(slices.Clone(spec), list)...)
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			if c, ok := item.(map[string]any); ok && c["name"] == name {
				return c, nil
			}
		}
	}
	return nil, fmt.Errorf("no container %s", name)
}

// containerField reads a field of a container.
func containerField(spec []string, name string, fields ...string) func(map[string]any) (string, error) {
	return func(obj map[string]any) (string, error) {
		c, err := container(obj, spec, name)
		if err != nil {
			return "", err
		}
		return fieldOf(fields...)(c)
	}
}

// containerFlag reads the value of a container's flag, written
// --flag=value in its command or arguments.
func containerFlag(spec []string, name, flag string) func(map[string]any) (string, error) {
	return func(obj map[string]any) (string, error) {
		c, err := container(obj, spec, name)
		if err != nil {
			return "", err
		}
		for _, list := range []string{"command", "args"} {
			args, _, _ := unstructured.NestedStringSlice(c, list)
			for _, a := range args {
				if v, ok := strings.CutPrefix(a, flag+"="); ok {
					return v, nil
				}
			}
		}
		return "", fmt.Errorf("container %s has no flag %s", name, flag)
	}
}

// imageFolder reads the folder of a container's image: its name without
// the last element, the tag and the digest.
func imageFolder(spec []string, name string) func(map[string]any) (string, error) {
	return func(obj map[string]any) (string, error) {
		image, err := containerField(spec, name, "image")(obj)
		if err != nil {
			return "", err
		}
		image, _, _ = strings.Cut(image, "@")
		if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
			image = image[:i]
		}
		return path.Dir(image), nil
	}
}

// volumeField reads a field of a volume of the pod spec at spec.
func volumeField(spec []string, name string, fields ...string) func(map[string]any) (string, error) {
	return func(obj map[string]any) (string, error) {
		volumes, _, err := unstructured.NestedSlice(obj, append(slices.Clone(spec), "volumes")...)
		if err != nil {
			return "", err
		}
		for _, v := range volumes {
			if m, ok := v.(map[string]any); ok && m["name"] == name {
				return fieldOf(fields...)(m)
			}
		}
		return "", fmt.Errorf("no volume %s", name)
	}
}

// claimTemplateField reads a field of the spec of the StatefulSet's claim
// template data.
func claimTemplateField(fields ...string) func(map[string]any) (string, error) {
	return func(obj map[string]any) (string, error) {
		claims, _, err := unstructured.NestedSlice(obj, "spec", "volumeClaimTemplates")
		if err != nil {
			return "", err
		}
		for _, c := range claims {
			m, _ := c.(map[string]any)
			if n, _, _ := unstructured.NestedString(m, "metadata", "name"); n == "data" {
				return fieldOf(append([]string{"spec"}, fields...)...)(m)
			}
		}
		return "", errors.New("no claim template data")
	}
}

// valueString writes v as a check compares it: a string as it is, anything
// else as JSON with sorted keys, as it reads from an object decoded from
// YAML or from the API alike.
func valueString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	var generic any
	if err := json.Unmarshal(data, &generic); err != nil {
		return string(data)
	}
	if s, ok := generic.(string); ok {
		return s
	}
	data, _ = json.Marshal(generic)
	return string(data)
}

// settingResult is a check's outcome on one object.
type settingResult struct {
	check settingCheck
	// where names the object read: its file, or "live".
	where string
	got   string
	err   error
}

// ok says whether the object has the setting.
func (r settingResult) ok() bool { return r.err == nil && r.got == r.check.want }

// runChecks runs every check on the objects objects returns for it.
func runChecks(checks []settingCheck, objects func(settingCheck) ([]sourcedObject, error)) []settingResult {
	var out []settingResult
	for _, c := range checks {
		objs, err := objects(c)
		if err == nil && len(objs) == 0 {
			err = errors.New("no such object")
		}
		if err != nil {
			out = append(out, settingResult{check: c, err: err})
			continue
		}
		for _, o := range objs {
			got, err := c.got(o.obj)
			out = append(out, settingResult{check: c, where: o.where, got: got, err: err})
		}
	}
	return out
}

// settingsTable writes the results as a table: key, object, field, want,
// got.
func settingsTable(results []settingResult) string {
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tOBJECT\tWHERE\tFIELD\tWANT\tGOT\t")
	for _, r := range results {
		got := r.got
		if r.err != nil {
			got = "error: " + r.err.Error()
		}
		mark := ""
		if !r.ok() {
			mark = "  <- differs"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.check.key, r.check.object(), r.where, r.check.field, r.check.want, got, mark)
	}
	w.Flush()
	return b.String()
}

// reportSettings logs the table and fails t naming each setting that an
// object does not have.
func reportSettings(t *testing.T, results []settingResult) {
	t.Helper()
	t.Logf("the configuration's settings:\n%s", settingsTable(results))
	for _, r := range results {
		switch {
		case r.err != nil:
			t.Errorf("%s: %s %s (%s): %v, want %s", r.check.key, r.check.object(), r.where, r.check.field, r.err, r.check.want)
		case !r.ok():
			t.Errorf("%s: %s %s (%s) is %s, want %s", r.check.key, r.check.object(), r.where, r.check.field, r.got, r.check.want)
		}
	}
}

// sourcedObject is an object and where it was read.
type sourcedObject struct {
	where string
	obj   map[string]any
}

// treeObjects reads every object of the manifests of a release tree (not
// its channels), by kind, namespace and name.
func treeObjects(tree string) (map[string][]sourcedObject, error) {
	out := map[string][]sourcedObject{}
	err := filepath.WalkDir(filepath.Join(tree, "addons"), func(file string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(file, ".yaml") {
			return err
		}
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		rel, _ := filepath.Rel(tree, file)
		r := utilyaml.NewYAMLReader(bufio.NewReader(f))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("reading %s: %w", rel, err)
			}
			var obj map[string]any
			if err := yaml.Unmarshal(doc, &obj); err != nil {
				return fmt.Errorf("reading %s: %w", rel, err)
			}
			u := unstructured.Unstructured{Object: obj}
			if obj == nil || u.GetKind() == "Addons" {
				continue
			}
			key := settingObjectKey(u.GetKind(), u.GetNamespace(), u.GetName())
			out[key] = append(out[key], sourcedObject{where: filepath.ToSlash(rel), obj: obj})
		}
	})
	return out, err
}

// settingObjectKey keys objects by kind, namespace and name.
func settingObjectKey(kind, namespace, name string) string {
	return kind + "/" + namespace + "/" + name
}

// renderedObjects returns the objects of a tree a check reads.
func renderedObjects(objs map[string][]sourcedObject) func(settingCheck) ([]sourcedObject, error) {
	return func(c settingCheck) ([]sourcedObject, error) {
		var out []sourcedObject
		for _, key := range slices.Sorted(maps.Keys(objs)) {
			if key == settingObjectKey(c.kind, c.namespace, c.name) || c.name == "" && strings.HasPrefix(key, settingObjectKey(c.kind, c.namespace, "")) {
				out = append(out, objs[key]...)
			}
		}
		return slices.DeleteFunc(out, func(o sourcedObject) bool { return o.where == c.except }), nil
	}
}

// renderConfigured writes cfg to a file in dir and renders it with the
// kos-release command bin, as an operator runs it, into dir/release; with
// resolve, pinning the images by digest. It returns the tree's folder.
func renderConfigured(t *testing.T, bin, dir string, cfg *api.ReleaseConfig, resolve bool) string {
	t.Helper()
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "release-config.yaml")
	if err := os.WriteFile(config, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("the release configuration:\n%s", data)
	tree := filepath.Join(dir, "release")
	args := []string{"render", "--config", config, "--out", tree}
	if resolve {
		args = append(args, "--resolve")
	}
	renderTree(t, bin, args...)
	return tree
}

// renderTree runs kos-release (bin) with args.
func renderTree(t *testing.T, bin string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if _, err := cmd.Output(); err != nil {
		t.Fatalf("kos-release %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
}
