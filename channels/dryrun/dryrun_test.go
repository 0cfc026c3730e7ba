package dryrun

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kos-sdn/kos/channels/preview"
)

var (
	namespaceKind = schema.GroupKind{Kind: "Namespace"}
	configMapKind = schema.GroupKind{Kind: "ConfigMap"}
	widgetKind    = schema.GroupKind{Group: "example.com", Kind: "Widget"}
)

// testOptions are Options for rows that need no dry-run: Namespaces first,
// then the rest.
func testOptions() Options {
	return Options{
		Kube: fake.NewClientset(),
		Each: func(ctx context.Context, n int, fn func(context.Context, int) error) error {
			var (
				wg   sync.WaitGroup
				mu   sync.Mutex
				errs []error
			)
			for i := range n {
				wg.Go(func() {
					if err := fn(ctx, i); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			return errors.Join(errs...)
		},
		Phase: func(gk schema.GroupKind) int {
			if gk == namespaceKind {
				return 0
			}
			return 1
		},
		Settle: func(_, _ *unstructured.Unstructured) ([]preview.Takeover, error) { return nil, nil },
	}
}

// row is a preview row as the test compares it.
type row struct{ Action, Object, Note string }

func rows(addons []preview.Addon) map[string][]row {
	out := map[string][]row{}
	for _, a := range addons {
		out[a.Addon] = []row{}
		for _, ch := range a.Objects {
			out[a.Addon] = append(out[a.Addon], row{string(ch.Action), ch.String(), ch.Note})
		}
	}
	return out
}

func owns(adopted map[Key]string, refused ...error) func(context.Context) (map[Key]string, []error, error) {
	return func(context.Context) (map[Key]string, []error, error) { return adopted, refused, nil }
}

func TestRun(t *testing.T) {
	t.Parallel()
	widget := Object{Key: Key{GroupKind: widgetKind, Namespace: "app", Name: "w"}}
	inNew := Object{Key: Key{GroupKind: configMapKind, Namespace: "new", Name: "c"}, Target: &Target{}}
	keep := Prunable{Key: Key{GroupKind: configMapKind, Namespace: "app", Name: "old"}, Keep: "it is annotated keep"}
	tests := []struct {
		name       string
		plan       Plan
		want       map[string][]row
		wantFailed []string
	}{{
		name: "kinds and namespaces the run makes",
		plan: Plan{
			Releases: []Release{
				{Addon: "a", Objects: []Object{widget, inNew}, Defines: map[schema.GroupKind]bool{widgetKind: true}, Ownership: owns(nil)},
				{Addon: "b", Objects: []Object{widget, inNew}, Ownership: owns(nil)},
			},
			Creates: map[string]string{"new": "a"},
			Defines: map[schema.GroupKind]string{widgetKind: "a"},
		},
		want: map[string][]row{
			"a": {
				{"create", "Widget.example.com app/w", "its kind is defined by this release"},
				{"create", "ConfigMap new/c", "its namespace is created by this release"},
			},
			"b": {
				{"create", "Widget.example.com app/w", "its kind is defined by addon a"},
				{"create", "ConfigMap new/c", "its namespace is created by addon a"},
			},
		},
	}, {
		name: "pruning after every phase, each object once",
		plan: Plan{
			Releases: []Release{{
				Addon:     "a",
				Objects:   []Object{widget, {Key: Key{GroupKind: namespaceKind, Name: "app"}}},
				Ownership: owns(nil),
				Prune:     func(context.Context) ([]Prunable, error) { return []Prunable{keep, keep}, nil },
			}},
		},
		want: map[string][]row{"a": {
			{"create", "Namespace app", "its kind is defined by this release"},
			{"create", "Widget.example.com app/w", "its kind is defined by this release"},
			{"keep", "ConfigMap app/old", "it is annotated keep"},
		}},
	}, {
		name: "refused objects fail the addon, which keeps its rows",
		plan: Plan{
			Releases: []Release{{Addon: "a", Objects: []Object{widget}, Ownership: owns(nil, errors.New("z refused"), errors.New("y refused"))}},
			Failed:   []Failure{{Addon: "unread", Err: errors.New("404")}},
		},
		want:       map[string][]row{"a": {{"create", "Widget.example.com app/w", "its kind is defined by this release"}}},
		wantFailed: []string{"unread: 404", "a: y refused\nz refused"},
	}, {
		name: "a failed ownership check leaves the addon out",
		plan: Plan{
			Releases: []Release{{Addon: "a", Objects: []Object{widget}, Ownership: func(context.Context) (map[Key]string, []error, error) {
				return nil, nil, errors.New("listing: forbidden")
			}}},
		},
		want:       map[string][]row{},
		wantFailed: []string{"a: listing: forbidden"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, failed := Run(context.Background(), tt.plan, testOptions())
			if diff := cmp.Diff(rows(got), tt.want); diff != "" {
				t.Errorf("rows (-got +want):\n%s", diff)
			}
			var gotFailed []string
			for _, f := range failed {
				gotFailed = append(gotFailed, f.Addon+": "+f.Err.Error())
			}
			if diff := cmp.Diff(gotFailed, tt.wantFailed); diff != "" {
				t.Errorf("failed (-got +want):\n%s", diff)
			}
		})
	}
}
