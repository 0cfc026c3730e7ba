package cli

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// planChannel writes a channel of addon plan-a at version, whose manifest
// holds the given documents, with the manifest hash given or, when empty,
// the manifest's own.
func (d channelDir) planChannel(version, hash string, docs ...string) string {
	d.t.Helper()
	m, sum := d.manifest("plan-a-"+version+".yaml", strings.Join(docs, "---\n"))
	if hash != "" {
		sum = hash
	}
	return d.channel("plan-"+version+".yaml", fmt.Sprintf(`kind: Addons
metadata: {name: plan}
spec:
  addons:
  - name: plan-a
    version: %s
    namespace: cli-plan
    selector: {k8s-addon: plan-a.addons.k8s.io}
    manifest: %s
    manifestHash: %s
`, version, m, sum))
}

func configMapDoc(name, version string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: default}\ndata: {version: %s}\n", name, version)
}

// secretDoc is a Secret whose field (data or stringData) holds the pairs kv.
func secretDoc(name, field string, kv ...string) string {
	var pairs []string
	for i := 0; i < len(kv); i += 2 {
		pairs = append(pairs, kv[i]+": "+kv[i+1])
	}
	return fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: default}\n%s: {%s}\n", name, field, strings.Join(pairs, ", "))
}

func TestIntegrationPlan(t *testing.T) {
	d := channelDir{t: t, dir: t.TempDir()}
	b64 := base64.StdEncoding.EncodeToString
	// The values the --diff must not show, in clear or base64.
	secrets := []string{"pw-one-9f3a", "pw-two-4b8d", "admin-7c1e", "tok-61aa", "key-new-52d0"}
	v1 := d.planChannel("1.0.0", "", configMapDoc("plan-same", "v1"), configMapDoc("plan-keep", "v1"), configMapDoc("plan-drop", "v1"),
		secretDoc("plan-secret", "data", "password", b64([]byte("pw-one-9f3a")), "user", b64([]byte("admin-7c1e"))))
	if code, _, errOut := runCLI(t, "apply", "channel", v1, "--yes"); code != 0 {
		t.Fatalf("installing: exit %d, %s", code, errOut)
	}
	v2 := d.planChannel("2.0.0", "", configMapDoc("plan-same", "v1"), configMapDoc("plan-keep", "v2"), configMapDoc("plan-new", "v2"),
		secretDoc("plan-secret", "data", "password", b64([]byte("pw-two-4b8d")), "user", b64([]byte("admin-7c1e")), "token", b64([]byte("tok-61aa"))),
		secretDoc("plan-secret-new", "stringData", "api-key", "key-new-52d0"))

	t.Run("create, update, unchanged and prune", func(t *testing.T) {
		code, out, errOut := runCLI(t, "apply", "channel", v2)
		if code != 0 || errOut != "" {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		want := "" +
			"NAME     CURRENT   UPDATE\n" +
			"plan-a   1.0.0     2.0.0\n" +
			"\n" +
			"plan-a: unchanged ConfigMap default/plan-same\n" +
			"plan-a: update ConfigMap default/plan-keep\n" +
			"plan-a: create ConfigMap default/plan-new\n" +
			"plan-a: update Secret default/plan-secret\n" +
			"plan-a: create Secret default/plan-secret-new\n" +
			"plan-a: prune ConfigMap default/plan-drop\n" +
			"\n" +
			"Must specify --yes to apply changes\n"
		if diff := cmp.Diff(out, want); diff != "" {
			t.Errorf("stdout (-got +want):\n%s", diff)
		}
		if !configMapExists(t, "default", "plan-drop") || configMapExists(t, "default", "plan-new") {
			t.Error("the plan changed the cluster")
		}
	})

	t.Run("--diff", func(t *testing.T) {
		code, out, errOut := runCLI(t, "apply", "channel", v2, "--diff")
		if code != 0 || errOut != "" {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		t.Logf("stdout:\n%s", out)
		for _, want := range []string{
			"plan-a: update ConfigMap default/plan-keep\n--- live/ConfigMap default/plan-keep\n+++ applied/ConfigMap default/plan-keep\n@@ ",
			"\n-  version: v1\n+  version: v2\n",
			"plan-a: create ConfigMap default/plan-new\n--- live/ConfigMap default/plan-new\n+++ applied/ConfigMap default/plan-new\n@@ -0,0 +1,",
			"+  name: plan-new\n",
			"plan-a: prune ConfigMap default/plan-drop\n--- live/ConfigMap default/plan-drop\n+++ applied/ConfigMap default/plan-drop\n@@ -1,",
			"plan-a: unchanged ConfigMap default/plan-same\nplan-a: update",
			"plan-a: update Secret default/plan-secret\n--- live/Secret default/plan-secret\n+++ applied/Secret default/plan-secret\n@@ ",
			"\n-  password: '(sensitive: changed, before)'\n+  password: '(sensitive: changed, after)'\n",
			"\n+  token: '(sensitive: added)'\n",
			"\n   user: '(sensitive: unchanged)'\n",
			"plan-a: create Secret default/plan-secret-new\n--- live/Secret default/plan-secret-new\n+++ applied/Secret default/plan-secret-new\n@@ -0,0 +1,",
			"\n+  api-key: '(sensitive: added)'\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("stdout does not contain %q", want)
			}
		}
		for _, server := range []string{"managedFields", "resourceVersion", "uid:", "creationTimestamp"} {
			if strings.Contains(out, server) {
				t.Errorf("the diff shows %s", server)
			}
		}
		for _, secret := range secrets {
			if strings.Contains(out, secret) || strings.Contains(out, b64([]byte(secret))) {
				t.Errorf("the diff shows the secret value %q", secret)
			}
		}
	})

	t.Run("-o json lists the objects", func(t *testing.T) {
		code, out, errOut := runCLI(t, "apply", "channel", v2, "-o", `jsonpath={range .items[0].objects[*]}{.action} {.kind} {.name}{"\n"}{end}`)
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		want := "unchanged ConfigMap plan-same\nupdate ConfigMap plan-keep\ncreate ConfigMap plan-new\n" +
			"update Secret plan-secret\ncreate Secret plan-secret-new\nprune ConfigMap plan-drop\n"
		if diff := cmp.Diff(out, want); diff != "" {
			t.Errorf("stdout (-got +want):\n%s", diff)
		}
	})

	bad := []struct {
		name    string
		channel string
		want    []string
	}{
		{name: "an invalid object", channel: d.planChannel("3.0.0", "", configMapDoc("plan-same", "v3"),
			"apiVersion: v1\nkind: Service\nmetadata: {name: plan-bad, namespace: default}\nspec: {ports: [{port: 70000}]}\n"),
			want: []string{`addon "plan-a"`, "Service default/plan-bad", "spec.ports[0].port", "nothing was changed"}},
		{name: "a kind the server does not serve", channel: d.planChannel("3.1.0", "", configMapDoc("plan-same", "v3"),
			"apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: plan-widget, namespace: default}\n"),
			want: []string{`addon "plan-a"`, "Widget.example.com default/plan-widget", "no matches for kind"}},
		{name: "a manifest that does not match its hash", channel: d.planChannel("3.2.0", strings.Repeat("ab", 32), configMapDoc("plan-same", "v3")),
			want: []string{`addon "plan-a"`, strings.Repeat("ab", 32)}},
		{name: "YAML that does not parse", channel: d.planChannel("3.3.0", "", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [\n"),
			want: []string{`addon "plan-a"`, "decoding manifest"}},
	}
	for _, tt := range bad {
		t.Run(tt.name+" fails the plan", func(t *testing.T) {
			code, out, errOut := runCLI(t, "apply", "channel", tt.channel)
			t.Logf("stderr: %s", errOut)
			if code != 1 || strings.Count(errOut, "\n") != 1 {
				t.Errorf("exit %d, stderr %q; want 1 and one error line", code, errOut)
			}
			for _, want := range tt.want {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr does not contain %q", want)
				}
			}
			if strings.Contains(out, "Must specify --yes") {
				t.Errorf("stdout asks for --yes after a failure: %q", out)
			}
			if !configMapExists(t, "default", "plan-drop") {
				t.Error("the plan changed the cluster")
			}
		})
	}
}

// TestIntegrationPlanNamespaceOfAnotherAddon plans, on a cluster without
// the namespace, two addons of which one creates the namespace that the
// other's objects live in: Apply applies both before it waits for either,
// so the plan shows the other's objects as created, as it does for an
// addon's own namespace.
func TestIntegrationPlanNamespaceOfAnotherAddon(t *testing.T) {
	d := channelDir{t: t, dir: t.TempDir()}
	const ns = "cli-plan-shared"
	owner, ownerSum := d.manifest("plan-owner.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+ns+"}\n")
	user, userSum := d.manifest("plan-user.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plan-user, namespace: "+ns+"}\n")
	channel := d.channel("plan-shared.yaml", fmt.Sprintf(`kind: Addons
metadata: {name: plan-shared}
spec:
  addons:
  - name: plan-owner
    version: 1.0.0
    namespace: cli-plan
    selector: {k8s-addon: plan-owner.addons.k8s.io}
    manifest: %s
    manifestHash: %s
  - name: plan-user
    version: 1.0.0
    namespace: cli-plan
    selector: {k8s-addon: plan-user.addons.k8s.io}
    manifest: %s
    manifestHash: %s
`, owner, ownerSum, user, userSum))
	code, out, errOut := runCLI(t, "apply", "channel", channel)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{
		"plan-owner: create Namespace " + ns + "\n",
		"plan-user: create ConfigMap " + ns + "/plan-user (its namespace is created by addon plan-owner)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout does not contain %q:\n%s", want, out)
		}
	}
}
