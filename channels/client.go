package channels

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// FieldManager is the field manager of every server-side apply this package
// makes.
const FieldManager = "channels"

// Client rates of a cluster client. What bounds the load a run puts on the
// kube-apiserver is the requests it keeps in flight (ApplyOptions.Parallelism);
// the rate is only a guard against a request loop, set above what a
// two-core control plane serves (about 500 writes a second). client-go's
// defaults (5 requests per second, bursts of 10) would make applying an
// addon of a few hundred objects take a minute, and 100 a second would
// still cap an addon of 500 objects at twice the time the server needs.
const (
	defaultQPS   = 1000
	defaultBurst = 1000
)

// Client talks to one cluster: it reads and writes install records, applies
// and prunes addons. It is safe for concurrent use.
type Client struct {
	// Kube is the typed clientset, used for namespaces, nodes and leases.
	Kube kubernetes.Interface
	// Dynamic applies, lists and deletes the objects of manifests.
	Dynamic dynamic.Interface
	// Metadata lists objects as their metadata alone, where labels,
	// annotations and managed fields are all that is read (ownership,
	// prune): the server sends less and the client decodes protobuf.
	Metadata metadata.Interface
	// Discovery caches discovery in memory; Mapper.Reset invalidates it.
	Discovery discovery.CachedDiscoveryInterface
	// Mapper maps kinds to resources. It reads discovery only when first
	// needed, so a run with nothing to apply never reads it.
	Mapper *restmapper.DeferredDiscoveryRESTMapper

	// scan is Metadata without the server's deprecation warnings, for the
	// lists of what a Namespace or CRD holds (keptIn, keptOf): nobody
	// asked for those kinds (v1 Endpoints warns). Nil, in a Client made without
	// NewClient, means Metadata.
	scan metadata.Interface
}

// NewClient builds a Client from a REST config. It copies the config and
// raises a QPS and Burst left at zero to 1000.
func NewClient(config *rest.Config) (*Client, error) {
	cfg := rest.CopyConfig(config)
	if cfg.QPS == 0 {
		cfg.QPS = defaultQPS
	}
	if cfg.Burst == 0 {
		cfg.Burst = defaultBurst
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating clientset: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating dynamic client: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating metadata client: %w", err)
	}
	quiet := rest.CopyConfig(cfg)
	quiet.WarningHandler, quiet.WarningHandlerWithContext = nil, rest.NoWarnings{}
	scan, err := metadata.NewForConfig(quiet)
	if err != nil {
		return nil, fmt.Errorf("creating metadata client: %w", err)
	}
	cached := memory.NewMemCacheClient(kube.Discovery())
	return &Client{
		Kube:      kube,
		Dynamic:   dyn,
		Metadata:  meta,
		Discovery: cached,
		Mapper:    restmapper.NewDeferredDiscoveryRESTMapper(cached),
		scan:      scan,
	}, nil
}

// resourceFor is the dynamic client of a resource in a namespace ("" for
// cluster-scoped).
func resourceFor(dyn dynamic.Interface, gvr schema.GroupVersionResource, namespace string) dynamic.ResourceInterface {
	if namespace == "" {
		return dyn.Resource(gvr)
	}
	return dyn.Resource(gvr).Namespace(namespace)
}
