package registry

import (
	"testing"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/storage"
	cacherstorage "k8s.io/apiserver/pkg/storage/cacher"
)

// namedStore is a storage that only tells which one it is.
type namedStore struct {
	storage.Interface
	name string
}

func TestTriggerRouterStoreFor(t *testing.T) {
	r := &triggerRouter{
		fields: []string{"spec.node", "status.vni"},
		stores: []storage.Interface{namedStore{name: "node"}, namedStore{name: "vni"}},
	}
	indexed := []string{"spec.node", "status.vni"}
	tests := []struct {
		name     string
		selector string
		index    []string
		want     string
	}{
		{"everything", "", indexed, "node"},
		{"by node", "spec.node=n1", indexed, "node"},
		{"by network", "status.vni=7,status.hostIP!=", indexed, "vni"},
		{"by both", "status.vni=7,spec.node=n1", indexed, "node"},
		{"network not indexed", "status.vni=7", []string{"spec.node"}, "node"},
		{"not a network", "status.vni!=7", indexed, "node"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := storage.SelectionPredicate{Label: labels.Everything(), Field: fields.ParseSelectorOrDie(tt.selector), IndexFields: tt.index}
			if got := r.storeFor(p).(namedStore).name; got != tt.want {
				t.Errorf("storeFor(%q) = %s, want %s", tt.selector, got, tt.want)
			}
		})
	}
}

func TestCached(t *testing.T) {
	tests := []struct {
		name string
		s    storage.Interface
		want bool
	}{
		{"a watch cache", &cacherstorage.CacheDelegator{}, true},
		{"a watch cache under a replaying storage", &replayingStorage{Interface: &cacherstorage.CacheDelegator{}}, true},
		{"etcd under a replaying storage", &replayingStorage{Interface: namedStore{name: "etcd"}}, false},
		{"etcd", namedStore{name: "etcd"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cached(tt.s); got != tt.want {
				t.Errorf("cached = %v, want %v", got, tt.want)
			}
		})
	}
}
