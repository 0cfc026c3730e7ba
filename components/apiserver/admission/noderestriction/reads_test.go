package noderestriction

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apiserver/registry"
	"github.com/kos-sdn/kos/components/apiserver/registry/networkattachment"
)

// readsStorage serves lists of NetworkAttachments: cached at resource
// version "0", current otherwise, filtered by the request's predicate. It
// records the resource versions asked for.
type readsStorage struct {
	storage.Interface
	cached, current []network.NetworkAttachment
	// cacheErr, if not nil, is the answer at resource version "0".
	cacheErr error
	asked    []string
}

func (s *readsStorage) GetList(_ context.Context, _ string, opts storage.ListOptions, listObj runtime.Object) error {
	s.asked = append(s.asked, opts.ResourceVersion)
	from := s.current
	if opts.ResourceVersion == "0" {
		if s.cacheErr != nil {
			return s.cacheErr
		}
		from = s.cached
	}
	list := listObj.(*network.NetworkAttachmentList)
	for _, a := range from {
		if ok, err := opts.Predicate.Matches(&a); err != nil {
			return err
		} else if ok {
			list.Items = append(list.Items, a)
		}
	}
	return nil
}

// TestNodeHasReadsTheCacheFirst checks that an agent's list of a network is
// decided from the cache when the cache shows its node in the network, and
// from a consistent list only when it does not.
func TestNodeHasReadsTheCacheFirst(t *testing.T) {
	att := func(name, node string, vni uint32) network.NetworkAttachment {
		return network.NetworkAttachment{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:       network.NetworkAttachmentSpec{Node: node, Subnet: "s1"},
			Status:     network.NetworkAttachmentStatus{IPv4: "10.0.0.5", AddressVNI: vni},
		}
	}
	inNetwork, elsewhere := att("a1", "n1", 90), att("a1", "n1", 95)
	tests := []struct {
		name            string
		cached, current []network.NetworkAttachment
		cacheErr        error
		wantAsked       []string
		wantErr         string // "" means allowed
	}{
		{"the cache shows the node in the network", []network.NetworkAttachment{inNetwork}, nil, nil, []string{"0"}, ""},
		{"only a consistent list does", nil, []network.NetworkAttachment{inNetwork}, nil, []string{"0", ""}, ""},
		{"the cache is behind an address", []network.NetworkAttachment{elsewhere}, []network.NetworkAttachment{inNetwork}, nil, []string{"0", ""}, ""},
		{"the cache cannot answer", nil, []network.NetworkAttachment{inNetwork}, apierrors.NewTooManyRequests("not ready", 1), []string{"0", ""}, ""},
		{"neither does", []network.NetworkAttachment{elsewhere}, []network.NetworkAttachment{elsewhere}, nil, []string{"0", ""},
			`agent "` + agent + `" of node "n1" may list NetworkAttachments only by a field selector`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			backend := &readsStorage{cached: tt.cached, current: tt.current, cacheErr: tt.cacheErr}
			store := &genericregistry.Store{
				NewFunc:     func() runtime.Object { return &network.NetworkAttachment{} },
				NewListFunc: func() runtime.Object { return &network.NetworkAttachmentList{} },
				KeyRootFunc: func(context.Context) string { return "/networkattachments" },
				PredicateFunc: func(l labels.Selector, f fields.Selector) storage.SelectionPredicate {
					return storage.SelectionPredicate{Label: l, Field: f, GetAttrs: networkattachment.GetAttrs}
				},
				DefaultQualifiedResource: network.Resource("networkattachments"),
				Storage:                  genericregistry.DryRunnableStorage{Storage: backend},
			}
			reads := ScopeReads(registry.NewREST(store), []string{agent})
			ctx := genericapirequest.WithNamespace(genericapirequest.WithUser(context.Background(), agentOn("n1")), "ns")
			selector := fields.OneTermEqualSelector("status.addressVNI", "90")
			_, err := reads.List(ctx, &metainternalversion.ListOptions{FieldSelector: selector})
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("List() = %v, want allowed", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("List() = %v, want an error with %q", err, tt.wantErr)
			}
			// The node reads come first; an allowed list reads once more,
			// for the answer.
			asked := backend.asked
			if tt.wantErr == "" {
				asked = asked[:len(asked)-1]
			}
			if diff := cmp.Diff(asked, tt.wantAsked); diff != "" {
				t.Errorf("resource versions of the node's reads (-got +want):\n%s", diff)
			}
		})
	}
}
