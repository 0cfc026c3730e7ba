package monitoring

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/tools/testenv"
)

const addonDir = "addons/kos-monitoring"

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// manifestObjects returns the objects of the addon's newest release.
func manifestObjects(t testing.TB) []*unstructured.Unstructured {
	t.Helper()
	root := repoRoot(t)
	releases, err := channels.Load(context.Background(), channels.NewFetcher(), filepath.Join(root, addonDir, "addon.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	newest := releases[len(releases)-1]
	data, err := channels.NewFetcher().FetchManifest(context.Background(), newest)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := channels.DecodeObjects(data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// configMapData returns the data of a ConfigMap of the manifest.
func configMapData(t testing.TB, objs []*unstructured.Unstructured, name string) map[string]string {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == "ConfigMap" && u.GetName() == name {
			data, _, err := unstructured.NestedStringMap(u.Object, "data")
			if err != nil {
				t.Fatal(err)
			}
			return data
		}
	}
	t.Fatalf("the manifest has no ConfigMap %s", name)
	return nil
}

// dashboardFiles returns the dashboards kept in the repository, by file
// name.
func dashboardFiles(t testing.TB) map[string]string {
	t.Helper()
	dir := filepath.Join(repoRoot(t), addonDir, "dashboards")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = string(data)
	}
	return files
}

// TestDashboardsShipped checks that the release's ConfigMap holds exactly
// the dashboard files of the repository.
func TestDashboardsShipped(t *testing.T) {
	shipped := configMapData(t, manifestObjects(t), "grafana-dashboards")
	files := dashboardFiles(t)
	for name, data := range files {
		if shipped[name] != data {
			t.Errorf("dashboard %s: the ConfigMap grafana-dashboards differs from %s/dashboards/%s", name, addonDir, name)
		}
	}
	for name := range shipped {
		if _, ok := files[name]; !ok {
			t.Errorf("the ConfigMap grafana-dashboards has %s, which %s/dashboards lacks", name, addonDir)
		}
	}
	if len(files) < 8 {
		names := make([]string, 0, len(files))
		for n := range files {
			names = append(names, n)
		}
		slices.Sort(names)
		t.Errorf("dashboards %v: want eight (subnet validation, addressing, create→ready, dissemination, agent fabric, work queues, kos-apiserver, etcd)", names)
	}
}
