package catalog

import (
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/tools/images"
)

// TestBundleNamesBuiltImages reads the repository's addons: every container
// of the newest releases that runs a KOS image names a tag that Build makes
// (the component versions of AddonVersions, and the etcd tools/etcd builds),
// and a command that the image holds.
func TestBundleNamesBuiltImages(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	dir := filepath.Join(root, "addons")
	versions, err := AddonVersions(dir)
	if err != nil {
		t.Fatal(err)
	}
	etcdVersion := etcdModuleVersion(t, filepath.Join(root, "tools", "etcd", "go.mod"))
	programs := map[string][]string{Etcd: {path.Join(images.BinDir, "etcd")}}
	for _, name := range Components {
		spec, err := Spec(name)
		if err != nil {
			t.Fatal(err)
		}
		if programs[name], err = spec.Programs(); err != nil {
			t.Fatal(err)
		}
	}
	built := map[string]string{} // tag → image name
	for _, name := range Components {
		built[Tag(name, versions[name])] = name
	}
	built[Tag(Etcd, etcdVersion)] = Etcd

	releases, err := LoadAddons(dir)
	if err != nil {
		t.Fatal(err)
	}
	newest := map[string]*semver.Version{}
	for _, r := range releases {
		if v := newest[r.Name]; r.Version != nil && (v == nil || r.Version.GT(*v)) {
			newest[r.Name] = r.Version
		}
	}
	checked := 0
	for _, r := range releases {
		if r.Version == nil || !r.Version.EQ(*newest[r.Name]) {
			continue
		}
		data, err := os.ReadFile(r.Manifest)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := channels.DecodeObjects(data)
		if err != nil {
			t.Fatalf("%s: %v", r.Manifest, err)
		}
		for _, obj := range objs {
			for _, c := range containers(t, obj) {
				image, _, _ := strings.Cut(c.image, "@")
				if !strings.HasPrefix(image, Registry+"/") {
					continue
				}
				checked++
				where := r.Manifest + ": " + obj.GetKind() + " " + obj.GetName() + " container " + c.name
				name, ok := built[image]
				if !ok {
					t.Errorf("%s: image %s is not built (built: %v)", where, c.image, slices.Sorted(maps.Keys(built)))
					continue
				}
				if len(c.command) == 0 {
					continue
				}
				cmd := c.command[0]
				if !slices.ContainsFunc(programs[name], func(p string) bool { return p == cmd || (!strings.Contains(cmd, "/") && path.Base(p) == cmd) }) {
					t.Errorf("%s: command %s is not in image %s, which holds %v", where, cmd, image, programs[name])
				}
			}
		}
	}
	if checked == 0 {
		t.Errorf("no container of the newest releases in %s runs a %s image", dir, Registry)
	}
}

type container struct {
	name, image string
	command     []string
}

// containers returns the containers and init containers of a workload or
// pod object.
func containers(t *testing.T, obj *unstructured.Unstructured) []container {
	t.Helper()
	spec := []string{"spec", "template", "spec"}
	switch obj.GetKind() {
	case "Pod":
		spec = []string{"spec"}
	case "CronJob":
		spec = []string{"spec", "jobTemplate", "spec", "template", "spec"}
	case "Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job":
	default:
		return nil
	}
	var out []container
	for _, field := range []string{"initContainers", "containers"} {
		list, _, err := unstructured.NestedSlice(obj.Object, append(slices.Clone(spec), field)...)
		if err != nil {
			t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		for _, item := range list {
			m, _ := item.(map[string]any)
			c := container{}
			c.name, _, _ = unstructured.NestedString(m, "name")
			c.image, _, _ = unstructured.NestedString(m, "image")
			c.command, _, _ = unstructured.NestedStringSlice(m, "command")
			out = append(out, c)
		}
	}
	return out
}

// etcdModuleVersion returns the version of etcd that tools/kube builds, from
// its go.mod, without its leading v.
func etcdModuleVersion(t *testing.T, goMod string) string {
	t.Helper()
	data, err := os.ReadFile(goMod)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?go\.etcd\.io/etcd/server/v3 v(\S+)`).FindSubmatch(data)
	if m == nil {
		t.Fatalf("%s requires no go.etcd.io/etcd/server/v3", goMod)
	}
	return string(m[1])
}
