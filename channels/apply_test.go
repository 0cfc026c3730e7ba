package channels

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestApplyErrorMessage(t *testing.T) {
	t.Parallel()
	err := &ApplyError{Failed: []AddonError{
		{Addon: "a", Err: errors.New("applying ConfigMap ns/x: boom")},
		{Addon: "b", Err: errors.Join(errors.New("one"), errors.New("two"))},
	}}
	got := err.Error()
	want := `2 addons failed: addon "a": applying ConfigMap ns/x: boom; addon "b": one; two`
	if got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	inner := fmt.Errorf("wrapped: %w", err)
	var ae *ApplyError
	if !errors.As(inner, &ae) || len(ae.Failed) != 2 {
		t.Errorf("errors.As(%v) did not find the ApplyError", inner)
	}
}

func TestPrefetchedObjects(t *testing.T) {
	read := &Addon{Name: "read"}
	failed := &Addon{Name: "failed"}
	slow := &Addon{Name: "slow"}
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a"}}}
	fetchErr := errors.New("manifest gone")
	done := func(objs []*unstructured.Unstructured, err error) *fetchedRelease {
		fr := &fetchedRelease{done: make(chan struct{}), objs: objs, err: err}
		close(fr.done)
		return fr
	}
	p := &prefetched{releases: map[*Addon]*fetchedRelease{
		read:   done([]*unstructured.Unstructured{cm}, nil),
		failed: done(nil, fetchErr),
		slow:   {done: make(chan struct{})},
	}}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()

	for _, tc := range []struct {
		name    string
		ctx     context.Context
		addon   *Addon
		want    []string
		wantErr error
	}{
		{name: "prefetched", ctx: context.Background(), addon: read, want: []string{"a"}},
		{name: "prefetch failed", ctx: context.Background(), addon: failed, wantErr: fetchErr},
		// A run cancelled while the release is still being read stops.
		{name: "cancelled", ctx: cancelled, addon: slow, wantErr: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := p.objects(tc.ctx, NewFetcher(), tc.addon)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			var got []string
			for _, u := range objs {
				got = append(got, u.GetName())
			}
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("objects (-got +want):\n%s", diff)
			}
		})
	}
}
