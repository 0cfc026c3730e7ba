package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/tools/testenv"
)

// TestMain stops the control plane the integration tests start on first
// use (testenv.Shared).
func TestMain(m *testing.M) { testenv.Main(m) }

// channelDir holds a channel and its manifests, as a test writes them.
type channelDir struct {
	t   *testing.T
	dir string
}

// manifest writes a manifest and returns its file name and hash.
func (d channelDir) manifest(name, content string) (string, string) {
	d.t.Helper()
	if err := os.WriteFile(filepath.Join(d.dir, name), []byte(content), 0o644); err != nil {
		d.t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(content))
	return name, hex.EncodeToString(sum[:])
}

// channel writes a channel file and returns its location.
func (d channelDir) channel(name, content string) string {
	d.t.Helper()
	loc := filepath.Join(d.dir, name)
	if err := os.WriteFile(loc, []byte(content), 0o644); err != nil {
		d.t.Fatal(err)
	}
	return loc
}

// demoChannel writes a channel of two addons: cli-demo at version with the
// given ConfigMaps in default, and cli-two at 0.1.0.
func (d channelDir) demoChannel(file, version string, configMaps ...string) string {
	d.t.Helper()
	var docs []string
	for _, cm := range configMaps {
		docs = append(docs, fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: default}\n", cm))
	}
	demo, demoHash := d.manifest("demo-"+version+".yaml", strings.Join(docs, "---\n"))
	two, twoHash := d.manifest("two.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cli-two, namespace: default}\n")
	return d.channel(file, fmt.Sprintf(`kind: Addons
metadata:
  name: cli
spec:
  addons:
  - name: cli-demo
    version: %s
    id: k8s-1.34
    kubernetesVersion: ">=1.34.0"
    selector: {k8s-addon: cli-demo.addons.k8s.io}
    manifest: %s
    manifestHash: %s
  - name: cli-demo
    version: 9.0.0
    id: k8s-1.20
    kubernetesVersion: "<1.21.0"
    selector: {k8s-addon: cli-demo.addons.k8s.io}
    manifest: does-not-exist.yaml
  - name: cli-two
    version: 0.1.0
    selector: {k8s-addon: cli-two.addons.k8s.io}
    manifest: %s
    manifestHash: %s
`, version, demo, demoHash, two, twoHash))
}

// runCLI runs the command line against the test cluster.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	env := testenv.Shared(t)
	var out, errOut bytes.Buffer
	args = append(args, "--kubeconfig", env.Kubeconfig)
	code = Main(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestIntegrationCLI(t *testing.T) {
	d := channelDir{t: t, dir: t.TempDir()}
	v1 := d.demoChannel("v1.yaml", "1.0.0", "cli-keep", "cli-drop")

	t.Run("plan without --yes changes nothing", func(t *testing.T) {
		code, out, errOut := runCLI(t, "apply", "channel", v1)
		if code != 0 || errOut != "" {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		want := "" +
			"NAME       CURRENT   UPDATE\n" +
			"cli-demo   -         1.0.0 (k8s-1.34)\n" +
			"cli-two    -         0.1.0\n" +
			"\n" +
			"cli-demo: create ConfigMap default/cli-keep\n" +
			"cli-demo: create ConfigMap default/cli-drop\n" +
			"cli-two: create ConfigMap default/cli-two\n" +
			"\n" +
			"Must specify --yes to apply changes\n"
		if diff := cmp.Diff(out, want); diff != "" {
			t.Errorf("stdout (-got +want):\n%s", diff)
		}
		if code, out, _ := runCLI(t, "get", "addons"); code != 0 || out != "" {
			t.Errorf("after a plan: get addons exit %d, stdout %q; want nothing installed", code, out)
		}
	})

	t.Run("apply --yes", func(t *testing.T) {
		code, out, errOut := runCLI(t, "apply", "channel", v1, "--yes")
		if code != 0 || errOut != "" {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		want := "" +
			"NAME       CURRENT   UPDATE\n" +
			"cli-demo   -         1.0.0 (k8s-1.34)\n" +
			"cli-two    -         0.1.0\n" +
			"\n" +
			"cli-demo: Installed 1.0.0 (k8s-1.34)\n" +
			"cli-two: Installed 0.1.0\n"
		if diff := cmp.Diff(out, want); diff != "" {
			t.Errorf("stdout (-got +want):\n%s", diff)
		}
	})

	t.Run("apply again: no update required", func(t *testing.T) {
		code, out, errOut := runCLI(t, "apply", "channel", v1, "--yes")
		if code != 0 || errOut != "" {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		if out != "No update required\n" {
			t.Errorf("stdout = %q, want %q", out, "No update required\n")
		}
	})

	t.Run("get addons", func(t *testing.T) {
		code, out, errOut := runCLI(t, "get", "addons")
		if code != 0 || errOut != "" {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		var got [][]string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			got = append(got, strings.Fields(line))
		}
		want := [][]string{
			{"NAMESPACE", "NAME", "VERSION", "ID", "CHANNEL", "PENDING"},
			{"kube-system", "cli-demo", "1.0.0", "k8s-1.34", v1, "-"},
			{"kube-system", "cli-two", "0.1.0", "-", v1, "-"},
		}
		if diff := cmp.Diff(got, want); diff != "" {
			t.Errorf("table (-got +want):\n%s", diff)
		}
	})

	t.Run("get addons -o json and yaml", func(t *testing.T) {
		for _, format := range []string{"json", "yaml"} {
			code, out, errOut := runCLI(t, "get", "addons", "-o", format)
			if code != 0 || errOut != "" {
				t.Fatalf("-o %s: exit %d, stderr %q", format, code, errOut)
			}
			var list struct {
				Items []map[string]any `json:"items"`
			}
			if err := yaml.Unmarshal([]byte(out), &list); err != nil {
				t.Fatalf("-o %s: %v in %s", format, err, out)
			}
			var rows []map[string]any
			for _, it := range list.Items {
				row := map[string]any{}
				for _, m := range []any{it["metadata"], it["record"]} {
					for k, v := range m.(map[string]any) {
						row[k] = v
					}
				}
				rows = append(rows, row)
			}
			if format == "json" && !json.Valid([]byte(out)) {
				t.Errorf("-o json is not JSON: %s", out)
			}
			if len(rows) != 2 {
				t.Fatalf("-o %s: %d addons, want 2: %s", format, len(rows), out)
			}
			got := map[string]any{}
			for _, k := range []string{"namespace", "name", "version", "id", "channel", "systemGeneration"} {
				got[k] = rows[0][k]
			}
			want := map[string]any{"namespace": "kube-system", "name": "cli-demo", "version": "1.0.0", "id": "k8s-1.34", "channel": v1, "systemGeneration": float64(1)}
			if diff := cmp.Diff(got, want); diff != "" {
				t.Errorf("-o %s first addon (-got +want):\n%s", format, diff)
			}
		}
	})

	t.Run("upgrade prunes", func(t *testing.T) {
		v2 := d.demoChannel("v2.yaml", "1.1.0", "cli-keep")
		code, out, errOut := runCLI(t, "apply", "channel", v2, "--yes")
		if code != 0 || errOut != "" {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		want := "" +
			"NAME       CURRENT            UPDATE\n" +
			"cli-demo   1.0.0 (k8s-1.34)   1.1.0 (k8s-1.34)\n" +
			"\n" +
			"cli-demo: Pruned ConfigMap default/cli-drop\n" +
			"cli-demo: Updated 1.0.0 (k8s-1.34) -> 1.1.0 (k8s-1.34)\n"
		if diff := cmp.Diff(out, want); diff != "" {
			t.Errorf("stdout (-got +want):\n%s", diff)
		}
	})

	t.Run("downgrade is shown as skipped", func(t *testing.T) {
		code, out, errOut := runCLI(t, "apply", "channel", v1)
		if code != 0 || errOut != "" {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		want := "" +
			"NAME       CURRENT            UPDATE\n" +
			"cli-demo   1.1.0 (k8s-1.34)   1.0.0 (k8s-1.34) skipped: downgrade refused\n" +
			"No update required\n"
		if diff := cmp.Diff(out, want); diff != "" {
			t.Errorf("stdout (-got +want):\n%s", diff)
		}
	})

	t.Run("a failing addon exits 1 naming the object", func(t *testing.T) {
		bad, badHash := d.manifest("bad.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: cli-bad, namespace: default}\nspec: {ports: [{port: 70000}]}\n")
		loc := d.channel("bad.yaml.channel", fmt.Sprintf(`kind: Addons
metadata: {name: cli-bad}
spec:
  addons:
  - version: 1.0.0
    selector: {k8s-addon: cli-bad.addons.k8s.io}
    manifest: %s
    manifestHash: %s
`, bad, badHash))
		code, out, errOut := runCLI(t, "apply", "channel", loc, "--yes")
		t.Logf("stderr: %s", errOut)
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		if strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "error: ") {
			t.Errorf("stderr is not one error line: %q", errOut)
		}
		for _, want := range []string{`addon "cli-bad"`, "Service default/cli-bad", "spec.ports[0].port", "run again"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("stderr %q does not contain %q", errOut, want)
			}
		}
		if strings.Contains(out, "Installed") {
			t.Errorf("stdout reports an install: %q", out)
		}
	})
}

func TestIntegrationCLIErrors(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{name: "no location", args: []string{"apply", "channel"}, wantCode: 2, wantErr: "give at least one channel location (see 'channels apply channel --help')"},
		{name: "unknown command", args: []string{"remove"}, wantCode: 2, wantErr: `unknown command "remove" for "channels"`},
		{name: "daemon without --yes", args: []string{"apply", "channel", "x.yaml", "--interval", "1m"}, wantCode: 2, wantErr: "--interval applies changes again and again: it needs --yes"},
		{name: "daemon flag without --interval", args: []string{"apply", "channel", "x.yaml", "--node-name", "n1"}, wantCode: 2, wantErr: "--node-name needs --interval"},
		{name: "health listener without --interval", args: []string{"apply", "channel", "x.yaml", "--health-bind-address", "127.0.0.1:0"}, wantCode: 2, wantErr: "--health-bind-address needs --interval"},
		{name: "bad node labels", args: []string{"apply", "channel", "x.yaml", "--yes", "--interval", "1m", "--node-name", "n1", "--node-labels", "a=b=c"}, wantCode: 2, wantErr: "--node-labels"},
		{name: "delete without a name", args: []string{"delete", "addon"}, wantCode: 2, wantErr: "give the name of at least one addon"},
		{name: "unknown subcommand", args: []string{"get", "widgets"}, wantCode: 2, wantErr: `unknown command "widgets" for "channels get"`},
		{name: "unknown flag", args: []string{"apply", "channel", "x.yaml", "--force"}, wantCode: 2, wantErr: "unknown flag: --force"},
		{name: "bad output format", args: []string{"get", "addons", "-o", "xml"}, wantCode: 2, wantErr: `--output "xml" is not a format; use one of: wide, custom-columns=SPEC, json, yaml`},
		{name: "missing channel", args: []string{"apply", "channel", "/does/not/exist.yaml"}, wantCode: 1, wantErr: "/does/not/exist.yaml"},
		{name: "unreadable kubeconfig", args: []string{"get", "addons", "--kubeconfig", "/does/not/exist"}, wantCode: 1, wantErr: "/does/not/exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Main(context.Background(), tt.args, &out, &errOut)
			t.Logf("stderr: %s", errOut.String())
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d", code, tt.wantCode)
			}
			got := errOut.String()
			if strings.Count(got, "\n") != 1 || !strings.HasPrefix(got, "error: ") || !strings.Contains(got, tt.wantErr) {
				t.Errorf("stderr = %q, want one error line containing %q", got, tt.wantErr)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"apply", "channel", "--help"}, {"get", "addons", "--help"}, {"delete", "addon", "--help"}, {"version", "--help"}, {"apply"}} {
		var out, errOut bytes.Buffer
		if code := Main(context.Background(), args, &out, &errOut); code != 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut.String())
		}
		for _, want := range []string{"Usage:", "Examples:", "--kubeconfig"} {
			if args[0] == "apply" && len(args) == 1 && want == "Examples:" {
				continue
			}
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: help does not mention %q:\n%s", args, want, out.String())
			}
		}
	}
}
