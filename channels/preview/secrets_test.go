package preview

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestObjectChangeDiffMasksSecrets(t *testing.T) {
	t.Parallel()
	secret := func(fields map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1",
			"kind":       "Secret",
			"metadata":   map[string]any{"name": "s", "namespace": "ns"},
			"type":       "Opaque",
		}}
		for k, v := range fields {
			u.Object[k] = v
		}
		return u
	}
	data := func(kv ...string) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name         string
		kind         schema.GroupKind
		live, merged *unstructured.Unstructured
		// want are lines the diff holds; secrets are strings it must not.
		want, secrets []string
	}{{
		name:    "secret created",
		merged:  secret(map[string]any{"data": data("password", "czNjcjN0", "user", "YWRtaW4=")}),
		want:    []string{"+  password: '(sensitive: added)'\n", "+  user: '(sensitive: added)'\n"},
		secrets: []string{"czNjcjN0", "YWRtaW4="},
	}, {
		name:    "key added",
		live:    secret(map[string]any{"data": data("user", "YWRtaW4=")}),
		merged:  secret(map[string]any{"data": data("password", "czNjcjN0", "user", "YWRtaW4=")}),
		want:    []string{"+  password: '(sensitive: added)'\n", "   user: '(sensitive: unchanged)'\n"},
		secrets: []string{"czNjcjN0", "YWRtaW4="},
	}, {
		name:   "value changed",
		live:   secret(map[string]any{"data": data("password", "b2xk", "user", "YWRtaW4=")}),
		merged: secret(map[string]any{"data": data("password", "bmV3", "user", "YWRtaW4=")}),
		want: []string{
			"-  password: '(sensitive: changed, before)'\n",
			"+  password: '(sensitive: changed, after)'\n",
			"   user: '(sensitive: unchanged)'\n",
		},
		secrets: []string{"b2xk", "bmV3", "YWRtaW4="},
	}, {
		name:    "value unchanged, other field changed",
		live:    secret(map[string]any{"data": data("password", "czNjcjN0")}),
		merged:  secret(map[string]any{"data": data("password", "czNjcjN0"), "kind": "Secret", "metadata": map[string]any{"name": "s", "labels": map[string]any{"a": "b"}}}),
		want:    []string{"   password: '(sensitive: unchanged)'\n", "+  labels:\n"},
		secrets: []string{"czNjcjN0"},
	}, {
		name:    "key removed",
		live:    secret(map[string]any{"data": data("password", "czNjcjN0", "user", "YWRtaW4=")}),
		merged:  secret(map[string]any{"data": data("user", "YWRtaW4=")}),
		want:    []string{"-  password: '(sensitive: removed)'\n", "   user: '(sensitive: unchanged)'\n"},
		secrets: []string{"czNjcjN0", "YWRtaW4="},
	}, {
		name:    "secret pruned",
		live:    secret(map[string]any{"data": data("password", "czNjcjN0")}),
		want:    []string{"-  password: '(sensitive: removed)'\n"},
		secrets: []string{"czNjcjN0"},
	}, {
		name:   "stringData",
		live:   secret(map[string]any{"stringData": data("token", "hunter2", "host", "db.example")}),
		merged: secret(map[string]any{"stringData": data("token", "hunter3", "host", "db.example", "port", "5432")}),
		want: []string{
			"-  token: '(sensitive: changed, before)'\n",
			"+  token: '(sensitive: changed, after)'\n",
			"   host: '(sensitive: unchanged)'\n",
			"+  port: '(sensitive: added)'\n",
		},
		secrets: []string{"hunter2", "hunter3", "db.example", "5432"},
	}, {
		name: "last-applied-configuration",
		live: func() *unstructured.Unstructured {
			u := secret(map[string]any{"data": data("password", "b2xk")})
			u.SetAnnotations(map[string]string{lastApplied: `{"data":{"password":"b2xk"}}`, "team": "a"})
			return u
		}(),
		merged: func() *unstructured.Unstructured {
			u := secret(map[string]any{"data": data("password", "bmV3")})
			u.SetAnnotations(map[string]string{lastApplied: `{"data":{"password":"b2xk"}}`, "team": "b"})
			return u
		}(),
		want: []string{
			"     kubectl.kubernetes.io/last-applied-configuration: '(sensitive: unchanged)'\n",
			"+    team: b\n",
			"+  password: '(sensitive: changed, after)'\n",
		},
		secrets: []string{"b2xk", "bmV3"},
	}, {
		name:    "data not a map",
		live:    secret(map[string]any{"data": "b2xk"}),
		merged:  secret(map[string]any{"data": data("password", "bmV3")}),
		want:    []string{"-data: '(sensitive: changed, before)'\n", "+data: '(sensitive: changed, after)'\n"},
		secrets: []string{"b2xk", "bmV3"},
	}, {
		name:   "configmap shows values",
		kind:   schema.GroupKind{Kind: "ConfigMap"},
		live:   diffConfigMap(map[string]any{"data": data("mode", "old")}),
		merged: diffConfigMap(map[string]any{"data": data("mode", "new")}),
		want:   []string{"-  mode: old\n", "+  mode: new\n"},
	}, {
		name:   "a Secret of another group shows values",
		kind:   schema.GroupKind{Group: "example.com", Kind: "Secret"},
		live:   secret(map[string]any{"data": data("mode", "old")}),
		merged: secret(map[string]any{"data": data("mode", "new")}),
		want:   []string{"-  mode: old\n", "+  mode: new\n"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ch := ObjectChange{Kind: schema.GroupKind{Kind: "Secret"}, Namespace: "ns", Name: "s", Live: tt.live, Merged: tt.merged}
			if tt.kind != (schema.GroupKind{}) {
				ch.Kind = tt.kind
			}
			var before, after *unstructured.Unstructured
			if tt.live != nil {
				before = tt.live.DeepCopy()
			}
			if tt.merged != nil {
				after = tt.merged.DeepCopy()
			}
			got, err := ch.Diff()
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("diff lacks %q:\n%s", w, got)
				}
			}
			for _, s := range tt.secrets {
				if strings.Contains(got, s) {
					t.Errorf("diff shows the secret value %q:\n%s", s, got)
				}
			}
			// Masking works on copies: the change keeps its objects.
			if diff := cmp.Diff(ch.Live, before); diff != "" {
				t.Errorf("Live changed by Diff (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(ch.Merged, after); diff != "" {
				t.Errorf("Merged changed by Diff (-got +want):\n%s", diff)
			}
		})
	}
}

func diffConfigMap(fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata":   map[string]any{"name": "s", "namespace": "ns"},
	}}
	for k, v := range fields {
		u.Object[k] = v
	}
	return u
}
