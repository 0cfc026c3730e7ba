package channels

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestDecodeObjects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		data    string
		want    []string // ObjectKey strings, in order
		wantErr []string // substrings of the error
	}{
		{
			name: "multi-document YAML with empty and comment-only documents",
			data: `---
# leading comment
---
apiVersion: v1
kind: ConfigMap
metadata: {name: a, namespace: ns}
---

---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: b
  namespace: ns
...
`,
			want: []string{"ConfigMap ns/a", "Deployment.apps ns/b"},
		},
		{
			name: "lists are expanded",
			data: `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Namespace
  metadata: {name: n1}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRole
  metadata: {name: r1}
---
apiVersion: v1
kind: ConfigMapList
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: c1, namespace: x}
`,
			want: []string{"Namespace n1", "ClusterRole.rbac.authorization.k8s.io r1", "ConfigMap x/c1"},
		},
		{
			name: "JSON document",
			data: `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","namespace":"n"}}`,
			want: []string{"Secret n/s"},
		},
		{
			name: "empty manifest",
			data: "\n---\n# nothing\n",
		},
		{
			name: "every bad document is reported, each by number",
			data: `apiVersion: v1
kind: ConfigMap
metadata: {name: ok}
---
kind: ConfigMap
metadata: {name: noversion}
---
apiVersion: v1
metadata: {name: nokind}
---
apiVersion: v1
kind: Pod
metadata: {generateName: p-}
---
- just
- a list
`,
			wantErr: []string{
				"document 2: ConfigMap noversion: apiVersion is missing",
				"document 3: object nokind: kind is missing",
				"document 4: Pod: metadata.name is missing",
				"document 5: not an object",
			},
		},
		{
			name:    "invalid YAML",
			data:    "apiVersion: v1\nkind: [\n",
			wantErr: []string{"document 1:"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := DecodeObjects([]byte(tt.data))
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("DecodeObjects() = %d objects, want an error", len(objs))
				}
				for _, want := range tt.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("DecodeObjects() error = %q, want it to contain %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeObjects() error = %v", err)
			}
			var got []string
			for _, u := range objs {
				got = append(got, keyOf(u).String())
			}
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("DecodeObjects() objects (-got +want):\n%s", diff)
			}
		})
	}
}

// TestDecodeObjectsKeepsOrder decodes more documents than there are
// decoders, two of them bad: the objects come out in manifest order, and
// the errors too.
func TestDecodeObjectsKeepsOrder(t *testing.T) {
	t.Parallel()
	var docs, want []string
	for i := range 300 {
		docs = append(docs, fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%03d, namespace: ns}\n", i))
		want = append(want, fmt.Sprintf("ConfigMap ns/cm-%03d", i))
	}
	objs, err := DecodeObjects([]byte(strings.Join(docs, "---\n")))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range objs {
		got = append(got, keyOf(u).String())
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("DecodeObjects() objects (-got +want):\n%s", diff)
	}

	docs[250] = "kind: ConfigMap\nmetadata: {name: late}\n"
	docs[7] = "kind: ConfigMap\nmetadata: {name: early}\n"
	_, err = DecodeObjects([]byte(strings.Join(docs, "---\n")))
	wantErr := "document 8: ConfigMap early: apiVersion is missing\ndocument 251: ConfigMap late: apiVersion is missing"
	if err == nil || err.Error() != wantErr {
		t.Errorf("DecodeObjects() error = %v, want %q", err, wantErr)
	}
}

func TestStampLabels(t *testing.T) {
	t.Parallel()
	objs, err := DecodeObjects([]byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: a
  labels: {app: x, k8s-addon: wrong}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: b}
`))
	if err != nil {
		t.Fatal(err)
	}
	StampLabels(objs, map[string]string{"k8s-addon": "demo.addons.k8s.io"})
	var got []map[string]string
	for _, u := range objs {
		got = append(got, u.GetLabels())
	}
	want := []map[string]string{
		{"app": "x", "k8s-addon": "demo.addons.k8s.io"},
		{"k8s-addon": "demo.addons.k8s.io"},
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("labels after StampLabels (-got +want):\n%s", diff)
	}
}

func TestPhaseOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		gk   schema.GroupKind
		want Phase
	}{
		{schema.GroupKind{Kind: "Namespace"}, PhaseDefinitions},
		{schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}, PhaseDefinitions},
		{schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}, PhaseIdentity},
		{schema.GroupKind{Kind: "ServiceAccount"}, PhaseIdentity},
		{schema.GroupKind{Kind: "ConfigMap"}, PhaseConfig},
		{schema.GroupKind{Kind: "Service"}, PhaseServices},
		{schema.GroupKind{Group: "apps", Kind: "DaemonSet"}, PhaseWorkloads},
		{schema.GroupKind{Group: "example.com", Kind: "Widget"}, PhaseOther},
		{schema.GroupKind{Group: "policy", Kind: "PodDisruptionBudget"}, PhaseOther},
		{schema.GroupKind{Group: "apiregistration.k8s.io", Kind: "APIService"}, PhaseRegistration},
		{schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}, PhaseRegistration},
		// Same kind name in another group is not the core kind.
		{schema.GroupKind{Group: "example.com", Kind: "Service"}, PhaseOther},
	}
	for _, tt := range tests {
		t.Run(tt.gk.String(), func(t *testing.T) {
			if got := PhaseOf(tt.gk); got != tt.want {
				t.Errorf("PhaseOf(%s) = %s, want %s", tt.gk, got, tt.want)
			}
		})
	}
}

func TestCRDEstablished(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		conditions string
		want       bool
		wantErr    bool
	}{
		{name: "no status yet", conditions: ``},
		{name: "established", conditions: `[{type: NamesAccepted, status: "True"}, {type: Established, status: "True"}]`, want: true},
		{name: "not yet established", conditions: `[{type: Established, status: "False"}]`},
		{name: "names refused", conditions: `[{type: NamesAccepted, status: "False", message: "taken"}]`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\n"
			if tt.conditions != "" {
				doc += "status: {conditions: " + tt.conditions + "}\n"
			}
			objs, err := DecodeObjects([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			got, err := crdEstablished(objs[0])
			if (err != nil) != tt.wantErr {
				t.Fatalf("crdEstablished() error = %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("crdEstablished() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestApplyWaves(t *testing.T) {
	t.Parallel()
	// Every phase is in exactly one wave, in order.
	var got []Phase
	for _, wv := range applyWaves {
		if wv.first > wv.last {
			t.Errorf("wave %v..%v is empty", wv.first, wv.last)
		}
		for p := wv.first; p <= wv.last; p++ {
			got = append(got, p)
		}
	}
	var want []Phase
	for p := Phase(0); p < phaseCount; p++ {
		want = append(want, p)
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("phases of the waves (-got +want):\n%s", diff)
	}
	// What must exist before others are created is never in their wave.
	waveOf := func(p Phase) int {
		for i, wv := range applyWaves {
			if wv.first <= p && p <= wv.last {
				return i
			}
		}
		return -1
	}
	for _, before := range [][2]Phase{
		{PhaseDefinitions, PhaseIdentity},
		{PhaseIdentity, PhaseWorkloads},
		{PhaseConfig, PhaseWorkloads},
		{PhaseServices, PhaseWorkloads},
		{PhaseOther, PhaseRegistration},
	} {
		if waveOf(before[0]) >= waveOf(before[1]) {
			t.Errorf("phase %v is not applied before phase %v starts", before[0], before[1])
		}
	}
}
