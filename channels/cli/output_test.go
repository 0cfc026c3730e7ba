package cli

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestCustomColumns(t *testing.T) {
	t.Parallel()
	objs := []*unstructured.Unstructured{
		{Object: map[string]any{"metadata": map[string]any{"name": "a", "labels": map[string]any{"x": "1"}}, "items": []any{"p", "q"}}},
		{Object: map[string]any{"metadata": map[string]any{"name": "b"}}},
	}
	tests := []struct {
		spec      string
		noHeaders bool
		want      string
		wantErr   bool
	}{
		{spec: "NAME:.metadata.name,X:metadata.labels.x", want: "NAME   X\na      1\nb      <none>\n"},
		{spec: "NAME:{.metadata.name},ITEMS:.items[*]", noHeaders: true, want: "a     p,q\nb     <none>\n"},
		{spec: "NAME", wantErr: true},
		{spec: "", wantErr: true},
		{spec: "NAME:.metadata.name[", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			cols, err := parseCustomColumns(tt.spec)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseCustomColumns: %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			var out bytes.Buffer
			if err := printCustomColumns(&out, cols, objs, tt.noHeaders); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(out.String(), tt.want); diff != "" {
				t.Errorf("output (-got +want):\n%s", diff)
			}
		})
	}
}
