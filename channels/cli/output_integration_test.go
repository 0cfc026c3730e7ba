package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/tools/testenv"
)

// outputChannel writes a channel of two addons recorded in namespace
// cli-output: out-a at version with one ConfigMap, and out-b 0.1.0.
func (d channelDir) outputChannel(file, version string) string {
	d.t.Helper()
	a, aHash := d.manifest("out-a-"+version+".yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: out-a, namespace: default}\ndata: {version: \""+version+"\"}\n")
	b, bHash := d.manifest("out-b.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: out-b, namespace: default}\n")
	return d.channel(file, fmt.Sprintf(`kind: Addons
metadata: {name: out}
spec:
  addons:
  - name: out-a
    version: %s
    id: k8s-1.34
    namespace: cli-output
    selector: {k8s-addon: out-a.addons.k8s.io}
    manifest: %s
    manifestHash: %s
  - name: out-b
    version: 0.1.0
    namespace: cli-output
    selector: {k8s-addon: out-b.addons.k8s.io}
    manifest: %s
    manifestHash: %s
`, version, a, aHash, b, bHash))
}

// linesWith returns the lines of out that contain s.
func linesWith(out, s string) []string {
	var got []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, s) {
			got = append(got, line)
		}
	}
	return got
}

func TestIntegrationOutput(t *testing.T) {
	d := channelDir{t: t, dir: t.TempDir()}
	v1 := d.outputChannel("out-v1.yaml", "1.0.0")

	t.Run("plan -o json lists every addon offered", func(t *testing.T) {
		code, out, errOut := runCLI(t, "apply", "channel", v1, "-o", "json")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		var list struct {
			Kind  string `json:"kind"`
			Items []struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct{ Name, Namespace string }
				Apply      bool   `json:"apply"`
				Reason     string `json:"reason"`
				Update     struct{ Version, ID string }
			} `json:"items"`
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("-o json: %v in %s", err, out)
		}
		var got []string
		for _, it := range list.Items {
			got = append(got, fmt.Sprintf("%s %s %s/%s %v %s %s %s", it.APIVersion, it.Kind, it.Metadata.Namespace, it.Metadata.Name, it.Apply, it.Reason, it.Update.Version, it.Update.ID))
		}
		want := []string{
			"addons.k8s.io/v1alpha1 AddonUpdate cli-output/out-a true install 1.0.0 k8s-1.34",
			"addons.k8s.io/v1alpha1 AddonUpdate cli-output/out-b true install 0.1.0 ",
		}
		if list.Kind != "List" || !cmp.Equal(got, want) {
			t.Errorf("kind %q, items (-got +want):\n%s", list.Kind, cmp.Diff(got, want))
		}
		if !strings.Contains(errOut, "Must specify --yes") {
			t.Errorf("stderr %q does not ask for --yes", errOut)
		}
	})

	t.Run("apply --yes -o name reports on stderr", func(t *testing.T) {
		code, out, errOut := runCLI(t, "apply", "channel", v1, "--yes", "-o", "name")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		want := "addonupdate.addons.k8s.io/out-a\naddonupdate.addons.k8s.io/out-b\n"
		if out != want {
			t.Errorf("stdout = %q, want %q", out, want)
		}
		for _, want := range []string{"out-a: Installed 1.0.0 (k8s-1.34)", "out-b: Installed 0.1.0"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("stderr %q does not contain %q", errOut, want)
			}
		}
	})

	formats := []struct {
		name string
		args []string
		// check returns what is wrong with stdout.
		check func(out string) string
	}{
		{name: "table", args: nil, check: func(out string) string {
			if !strings.HasPrefix(out, "NAMESPACE ") {
				return "no header line"
			}
			got := linesWith(out, "cli-output")
			want := []string{
				"cli-output    out-a        1.0.0     k8s-1.34   " + v1 + "   -",
				"cli-output    out-b        0.1.0     -          " + v1 + "   -",
			}
			return cmp.Diff(fieldsOf(got), fieldsOf(want))
		}},
		{name: "no headers", args: []string{"--no-headers"}, check: func(out string) string {
			if strings.Contains(out, "NAMESPACE") {
				return "header printed"
			}
			return cmp.Diff(len(linesWith(out, "cli-output")), 2)
		}},
		{name: "wide", args: []string{"-o", "wide"}, check: func(out string) string {
			header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
			want := []string{"NAMESPACE", "NAME", "VERSION", "ID", "CHANNEL", "PENDING", "MANIFEST-HASH", "GENERATION", "KINDS"}
			if diff := cmp.Diff(header, want); diff != "" {
				return diff
			}
			row := strings.Fields(linesWith(out, "out-a")[0])
			return cmp.Diff(row[5:], []string{"-", shortHash(hashOf(t, d, "out-a-1.0.0.yaml")), "1", "1"})
		}},
		{name: "json", args: []string{"-o", "json"}, check: func(out string) string {
			if !json.Valid([]byte(out)) {
				return "not JSON"
			}
			return checkAddonList(out, v1)
		}},
		{name: "yaml", args: []string{"-o", "yaml"}, check: func(out string) string { return checkAddonList(out, v1) }},
		{name: "name", args: []string{"-o", "name"}, check: func(out string) string {
			return cmp.Diff(linesWith(out, "out-"), []string{"addon.addons.k8s.io/out-a", "addon.addons.k8s.io/out-b"})
		}},
		{name: "jsonpath", args: []string{"-o", `jsonpath={range .items[?(@.metadata.namespace=="cli-output")]}{.metadata.name}={.record.version}{"\n"}{end}`}, check: func(out string) string {
			return cmp.Diff(out, "out-a=1.0.0\nout-b=0.1.0\n")
		}},
		{name: "go-template", args: []string{"-o", `go-template={{range .items}}{{if eq .metadata.namespace "cli-output"}}{{.metadata.name}} {{end}}{{end}}`}, check: func(out string) string {
			return cmp.Diff(out, "out-a out-b ")
		}},
		{name: "custom-columns", args: []string{"-o", "custom-columns=NAME:.metadata.name,NS:metadata.namespace,HASH:.record.manifestHash,MISSING:.record.nothing"}, check: func(out string) string {
			if !strings.HasPrefix(out, "NAME") {
				return "no header"
			}
			return cmp.Diff(fieldsOf(linesWith(out, "cli-output")), [][]string{
				{"out-a", "cli-output", hashOf(t, d, "out-a-1.0.0.yaml"), "<none>"},
				{"out-b", "cli-output", hashOf(t, d, "out-b.yaml"), "<none>"},
			})
		}},
		{name: "custom-columns-file", args: []string{"-o", "custom-columns-file=" + d.channel("columns.txt", "NAME   VERSION\n.metadata.name   .record.version\n"), "--no-headers"}, check: func(out string) string {
			return cmp.Diff(fieldsOf(linesWith(out, "out-")), [][]string{{"out-a", "1.0.0"}, {"out-b", "0.1.0"}})
		}},
	}
	for _, f := range formats {
		t.Run("get addons "+f.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"get", "addons"}, f.args...)...)
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if problem := f.check(out); problem != "" {
				t.Errorf("%s\nstdout:\n%s", problem, out)
			}
		})
	}

	t.Run("plan -o wide and custom-columns", func(t *testing.T) {
		v2 := d.outputChannel("out-v2.yaml", "1.1.0")
		code, out, errOut := runCLI(t, "apply", "channel", v2, "-o", "wide")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		want := [][]string{
			{"NAME", "CURRENT", "UPDATE", "NAMESPACE", "REASON", "MANIFEST"},
			{"out-a", "1.0.0", "(k8s-1.34)", "1.1.0", "(k8s-1.34)", "cli-output", "upgrade", filepath.Join(d.dir, "out-a-1.1.0.yaml")},
		}
		if diff := cmp.Diff(fieldsOf(strings.Split(strings.TrimSpace(strings.Split(out, "\n\n")[0]), "\n")), want); diff != "" {
			t.Errorf("plan -o wide (-got +want):\n%s\n%s", diff, out)
		}
		code, out, errOut = runCLI(t, "apply", "channel", v2, "-o", "custom-columns=ADDON:.metadata.name,FROM:.current.version,TO:.update.version,APPLY:.apply", "--no-headers")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		if diff := cmp.Diff(fieldsOf(strings.Split(strings.TrimSpace(out), "\n")), [][]string{{"out-a", "1.0.0", "1.1.0", "true"}, {"out-b", "0.1.0", "0.1.0", "false"}}); diff != "" {
			t.Errorf("plan -o custom-columns (-got +want):\n%s", diff)
		}
	})

	t.Run("bad formats are usage errors", func(t *testing.T) {
		for _, args := range [][]string{
			{"get", "addons", "-o", "xml"},
			{"get", "addons", "-o", "jsonpath={.items[}"},
			{"get", "addons", "-o", "custom-columns=NAME"},
			{"apply", "channel", v1, "-o", "table"},
		} {
			code, _, errOut := runCLI(t, args...)
			if code != 2 || !strings.HasPrefix(errOut, "error: ") || strings.Count(errOut, "\n") != 1 {
				t.Errorf("%v: exit %d, stderr %q; want 2 and one error line", args, code, errOut)
			}
		}
	})

	t.Run("version", func(t *testing.T) {
		env := testenv.Shared(t)
		code, out, errOut := runCLI(t, "version")
		if code != 0 || errOut != "" {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		if !strings.HasPrefix(out, "Client Version: ") || !strings.Contains(out, "\nServer Version: "+env.Version+"\n") {
			t.Errorf("stdout = %q, want client and server (%s) versions", out, env.Version)
		}
		code, out, _ = runCLI(t, "version", "--client", "-o", "json")
		var v versionInfo
		if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.ClientVersion.GoVersion == "" || v.ServerVersion != "" {
			t.Errorf("version --client -o json: exit %d, %v, %+v", code, err, v)
		}
	})
}

// checkAddonList checks -o json or yaml of get addons.
func checkAddonList(out, channel string) string {
	var list struct {
		APIVersion string           `json:"apiVersion"`
		Kind       string           `json:"kind"`
		Items      []map[string]any `json:"items"`
	}
	if err := yaml.Unmarshal([]byte(out), &list); err != nil {
		return err.Error()
	}
	var got []map[string]any
	for _, it := range list.Items {
		if it["metadata"].(map[string]any)["namespace"] == "cli-output" {
			rec := it["record"].(map[string]any)
			delete(rec, "manifestHash")
			delete(rec, "inventory")
			got = append(got, map[string]any{"apiVersion": it["apiVersion"], "kind": it["kind"], "metadata": it["metadata"], "record": rec})
		}
	}
	want := []map[string]any{
		{"apiVersion": outputAPIVersion, "kind": "Addon", "metadata": map[string]any{"name": "out-a", "namespace": "cli-output"},
			"record": map[string]any{"version": "1.0.0", "id": "k8s-1.34", "channel": channel, "systemGeneration": float64(1)}},
		{"apiVersion": outputAPIVersion, "kind": "Addon", "metadata": map[string]any{"name": "out-b", "namespace": "cli-output"},
			"record": map[string]any{"version": "0.1.0", "channel": channel, "systemGeneration": float64(1)}},
	}
	if list.APIVersion != "v1" || list.Kind != "List" {
		return fmt.Sprintf("got %s %s, want v1 List", list.APIVersion, list.Kind)
	}
	return cmp.Diff(got, want)
}

// fieldsOf splits each line into fields.
func fieldsOf(lines []string) [][]string {
	out := make([][]string, len(lines))
	for i, l := range lines {
		out[i] = strings.Fields(l)
	}
	return out
}

// hashOf is the hash of a manifest the test wrote.
func hashOf(t *testing.T, d channelDir, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(d.dir, name))
	if err != nil {
		t.Fatal(err)
	}
	_, hash := d.manifest(name, string(data))
	return hash
}

func TestIntegrationInterrupt(t *testing.T) {
	env := testenv.Shared(t)
	bin := testenv.Build(t, "cmd/channels")
	// A channel server that answers only when the test ends, and says when
	// the run asks: the run is interrupted while it fetches.
	release := make(chan struct{})
	fetching := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case fetching <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)

	cmd := exec.Command(bin, "apply", "channel", srv.URL+"/channel.yaml", "--yes", "--kubeconfig", env.Kubeconfig)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	// The command handles SIGINT from its start (Run), long before it
	// fetches.
	select {
	case <-fetching:
	case <-done:
		t.Fatalf("channels exited (%v) before fetching the channel; stderr %q", cmd.ProcessState, stderr.String())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("channels did not fetch the channel within 30s; stderr %q", stderr.String())
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("channels did not exit within 30s of SIGINT")
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit %d after SIGINT, want 130; stderr %q", code, stderr.String())
	}
	if !strings.HasPrefix(stderr.String(), "error: interrupted") {
		t.Errorf("stderr = %q, want it to say interrupted", stderr.String())
	}
}
