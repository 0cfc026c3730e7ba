package kubectlkos

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestRedactText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"nothing secret", `I1127 10:00:00 agent.go:1] "Synced" key="ns/a1" token_count=3`, `I1127 10:00:00 agent.go:1] "Synced" key="ns/a1" token_count=3`},
		{"bearer header", `Authorization: Bearer abcdefghijkl.mnop`, `Authorization: Bearer REDACTED`},
		{"basic header", `authorization: basic dXNlcjpwYXNzd29yZA==`, `authorization: basic REDACTED`},
		{"service account token", `got eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW0ifQ.c2lnbmF0dXJl in a line`, `got REDACTED in a line`},
		{"token flag", `--token=s3cr3t-value --v=2`, `--token=REDACTED --v=2`},
		{"password key=value", `password=hunter2&user=me`, `password=REDACTED&user=me`},
		{"json secret", `{"clientSecret": "abc123", "name": "x"}`, `{"clientSecret": "REDACTED", "name": "x"}`},
		{"json token", `{"access_token":"tok-1","expires":3600}`, `{"access_token":"REDACTED","expires":3600}`},
		{"aws keys", `AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG AKIAIOSFODNN7EXAMPLE`, `AWS_SECRET_ACCESS_KEY=REDACTED REDACTED`},
		{"private key", "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nAAAA\n-----END RSA PRIVATE KEY-----\ndone",
			"key:\n-----BEGIN RSA PRIVATE KEY----- REDACTED -----END RSA PRIVATE KEY-----\ndone"},
		{"flows stay", "cookie=0x6b4000010a000005, table=1, priority=100,tun_id=0x1001,dl_dst=06:f0:00:02:10:01 actions=output:3",
			"cookie=0x6b4000010a000005, table=1, priority=100,tun_id=0x1001,dl_dst=06:f0:00:02:10:01 actions=output:3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(string(redactText([]byte(tt.in))), tt.want); diff != "" {
				t.Errorf("redactText(%q) (-got +want):\n%s", tt.in, diff)
			}
		})
	}
}

func TestRedactObject(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   map[string]any
		want map[string]any
	}{{
		name: "secret",
		in: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s",
			"annotations": map[string]any{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"token":"dG9r"}}`}},
			"data": map[string]any{"token": "dG9r"}, "stringData": map[string]any{"password": "p"}},
		want: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s"},
			"data": map[string]any{"token": "REDACTED"}, "stringData": map[string]any{"password": "REDACTED"}},
	}, {
		name: "pod environment",
		in: map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p", "managedFields": []any{map[string]any{"manager": "x"}}},
			"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "env": []any{
				map[string]any{"name": "PASSWORD", "value": "hunter2"},
				map[string]any{"name": "NODE_NAME", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "spec.nodeName"}}},
			}}}}},
		want: map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p"},
			"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "env": []any{
				map[string]any{"name": "PASSWORD", "value": "REDACTED"},
				map[string]any{"name": "NODE_NAME", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "spec.nodeName"}}},
			}}}}},
	}, {
		name: "daemon set template",
		in: map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": map[string]any{"name": "d"},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"initContainers": []any{map[string]any{"name": "c", "env": []any{
				map[string]any{"name": "TOKEN", "value": "t"}}}}}}}},
		want: map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": map[string]any{"name": "d"},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"initContainers": []any{map[string]any{"name": "c", "env": []any{
				map[string]any{"name": "TOKEN", "value": "REDACTED"}}}}}}}},
	}, {
		name: "KOS object stays",
		in: map[string]any{"apiVersion": "network.example.com/v1alpha1", "kind": "NetworkAttachment", "metadata": map[string]any{"name": "a1"},
			"spec": map[string]any{"node": "n1", "subnet": "s1"}},
		want: map[string]any{"apiVersion": "network.example.com/v1alpha1", "kind": "NetworkAttachment", "metadata": map[string]any{"name": "a1"},
			"spec": map[string]any{"node": "n1", "subnet": "s1"}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{Object: tt.in}
			redactObject(obj)
			if diff := cmp.Diff(obj.Object, tt.want); diff != "" {
				t.Errorf("redactObject (-got +want):\n%s", diff)
			}
		})
	}
}
