// Package policy provides the agent's policy enforcer: it watches the
// NodeNetworkPolicies that kos-controller-manager publishes for its node
// (one per network where some MultiNetworkPolicy isolates a local
// attachment) and programs each network's policy into the node's switch
// with the fabric's SetPolicy, one network at a time, lifting it when the
// network's last NodeNetworkPolicy goes. It also counts its updates and
// exports the switch's policy drops.
package policy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	kosinformers "github.com/kos-sdn/kos/components/generated/informers/externalversions/network/v1alpha1"
)

// DefaultRetry is how often an enforcer that may not list
// NodeNetworkPolicies asks again.
const DefaultRetry = 30 * time.Second

// Switch is what the enforcer needs of the node's fabric.
type Switch interface {
	SetPolicy(ctx context.Context, p fabric.NetworkPolicy) error
}

// DropCounter is a switch that counts what policy dropped
// ((*ovs.Fabric).PolicyDrops); the enforcer exports the counts when its
// switch is one.
type DropCounter interface {
	PolicyDrops(ctx context.Context) ([]fabric.PolicyDrop, error)
}

// NetworkDropCounter is a DropCounter that reads one network's drops
// ((*ovs.Fabric).NetworkPolicyDrops): the enforcer reads them just before
// it rewrites the network's flows, which start their counts again from 0,
// so that the metrics lose none.
type NetworkDropCounter interface {
	NetworkPolicyDrops(ctx context.Context, vni uint32) ([]fabric.PolicyDrop, error)
}

// Config is what an Enforcer needs.
type Config struct {
	// Node is the node whose NodeNetworkPolicies the enforcer programs.
	Node string
	// Client reaches the KOS API.
	Client kosclient.Interface
	// Switch is the node's switch.
	Switch Switch
	// Registerer is where the metrics are registered; nil registers them
	// nowhere.
	Registerer prometheus.Registerer
}

// vniIndex indexes NodeNetworkPolicies by spec.vni.
const vniIndex = "vni"

// Enforcer programs the NodeNetworkPolicies of its node into the switch.
type Enforcer struct {
	node     string
	client   kosclient.Interface
	sw       Switch
	informer cache.SharedIndexInformer
	// queue holds VNIs, as decimal strings: a key is worked on by one
	// worker at a time, so calls of SetPolicy for one network never
	// overlap.
	queue   workqueue.TypedRateLimitingInterface[string]
	metrics *metrics

	// retry is how often Run asks again whether it may list
	// NodeNetworkPolicies.
	retry time.Duration

	// mu guards applied: by VNI, the policy last set on the switch (one
	// without policies for a network lifted).
	mu      sync.Mutex
	applied map[uint32]fabric.NetworkPolicy
}

// New returns an enforcer for cfg. It starts nothing: call Run.
func New(cfg Config) (*Enforcer, error) {
	if cfg.Node == "" || cfg.Client == nil || cfg.Switch == nil {
		return nil, errors.New("the policy enforcer needs a node, a KOS client and a switch")
	}
	e := &Enforcer{
		node:   cfg.Node,
		client: cfg.Client,
		sw:     cfg.Switch,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kos_agent_policy"}),
		applied: map[uint32]fabric.NetworkPolicy{},
		retry:   DefaultRetry,
	}
	m, err := newMetrics(cfg.Registerer, e)
	if err != nil {
		return nil, fmt.Errorf("registering the policy metrics: %w", err)
	}
	e.metrics = m
	byNode := fields.OneTermEqualSelector(v1alpha1.FieldNode, e.node).String()
	e.informer = kosinformers.NewFilteredNodeNetworkPolicyInformer(cfg.Client, metav1.NamespaceAll, 0,
		cache.Indexers{vniIndex: indexByVNI},
		func(o *metav1.ListOptions) { o.FieldSelector = byNode })
	enqueue := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if p, ok := obj.(*v1alpha1.NodeNetworkPolicy); ok {
			e.queue.Add(strconv.FormatUint(uint64(p.Spec.VNI), 10))
		}
	}
	if _, err := e.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return nil, fmt.Errorf("watching NodeNetworkPolicies: %w", err)
	}
	return e, nil
}

func indexByVNI(obj any) ([]string, error) {
	p, ok := obj.(*v1alpha1.NodeNetworkPolicy)
	if !ok {
		return nil, nil
	}
	return []string{strconv.FormatUint(uint64(p.Spec.VNI), 10)}, nil
}

// Run watches the node's NodeNetworkPolicies and programs them with
// workers goroutines until ctx ends; it returns once they stopped. While
// the agent may not list NodeNetworkPolicies, or the KOS API serves none
// (0.3.0's manifests and servers), it logs that once, leaves the switch's
// policy as it is, and asks again every e.retry, so that rights granted
// later take effect without a restart.
func (e *Enforcer) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer e.queue.ShutDown()
	logger := klog.FromContext(ctx)
	for told := false; ; told = true {
		_, err := e.client.NetworkV1alpha1().NodeNetworkPolicies(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector(v1alpha1.FieldNode, e.node).String(), Limit: 1})
		if !apierrors.IsForbidden(err) && !apierrors.IsNotFound(err) {
			break
		}
		if !told {
			logger.Info("Not enforcing MultiNetworkPolicies: the agent may not list NodeNetworkPolicies, or the KOS API serves none; asking again now and then",
				"reason", err.Error(), "every", e.retry)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(e.retry):
		}
	}
	// Any other failure is the informer's to retry.
	logger.Info("Enforcing the NodeNetworkPolicies of the node", "workers", workers)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { e.informer.RunWithContext(ctx) })
	if !cache.WaitForNamedCacheSyncWithContext(ctx, e.informer.HasSynced) {
		return nil
	}
	for range workers {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for e.next(ctx) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
	e.queue.ShutDown()
	return nil
}

// Reconciled tells the enforcer which networks have policy on the switch
// (fabric.Inventory.Policies), as the agent's full reconcile read it: a
// network with policy the enforcer did not set (left by an agent before a
// restart) is set or lifted, and one it set that the switch lost (as when
// ovs-vswitchd restarts) is set again. It only queues networks; it does
// not block.
func (e *Enforcer) Reconciled(onSwitch []uint32) {
	e.mu.Lock()
	var again []uint32
	for vni, p := range e.applied {
		if p.Isolates() && !slices.Contains(onSwitch, vni) {
			delete(e.applied, vni)
			again = append(again, vni)
		}
	}
	for _, vni := range onSwitch {
		if p, ok := e.applied[vni]; !ok || !p.Isolates() {
			delete(e.applied, vni)
			again = append(again, vni)
		}
	}
	e.mu.Unlock()
	for _, vni := range again {
		e.queue.Add(strconv.FormatUint(uint64(vni), 10))
	}
}

// Applied returns the policy of network vni that the enforcer last set on
// the switch, one without policies when it set none. The caller must not
// change it.
func (e *Enforcer) Applied(vni uint32) fabric.NetworkPolicy {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.applied[vni]; ok {
		return p
	}
	return fabric.NetworkPolicy{VNI: vni}
}

// next syncs the next network of the queue; false once it shut down.
func (e *Enforcer) next(ctx context.Context) bool {
	key, quit := e.queue.Get()
	if quit {
		return false
	}
	defer e.queue.Done(key)
	if err := e.sync(ctx, key); err != nil {
		klog.FromContext(ctx).Error(err, "Setting a network's policy failed; retrying", "vni", key)
		e.queue.AddRateLimited(key)
		return true
	}
	e.queue.Forget(key)
	return true
}

// sync sets the policy of network key (a VNI) on the switch to what the
// node's NodeNetworkPolicies of that network say, unless it is set
// already: none lifts it.
func (e *Enforcer) sync(ctx context.Context, key string) error {
	n, err := strconv.ParseUint(key, 10, 32)
	if err != nil {
		return nil // not a key the enforcer queues
	}
	vni := uint32(n)
	objs, err := e.informer.GetIndexer().ByIndex(vniIndex, key)
	if err != nil {
		return fmt.Errorf("listing the NodeNetworkPolicies of network %d from the cache: %w", vni, err)
	}
	want := fabric.NetworkPolicy{VNI: vni}
	// One per network is the rule (a network lives in one namespace);
	// should two namespaces hold one, their policies add up.
	slices.SortFunc(objs, func(a, b any) int {
		return cmp.Compare(a.(*v1alpha1.NodeNetworkPolicy).Namespace, b.(*v1alpha1.NodeNetworkPolicy).Namespace)
	})
	for _, obj := range objs {
		p := obj.(*v1alpha1.NodeNetworkPolicy)
		np, err := FromSpec(p.Spec)
		if err != nil {
			// The server validates what it stores: only a newer
			// controller's model reads wrong here. Waiting will not fix it.
			e.metrics.updates.WithLabelValues("invalid").Inc()
			klog.FromContext(ctx).Error(err, "Ignoring a NodeNetworkPolicy that does not read", "nodeNetworkPolicy", klog.KObj(p))
			continue
		}
		want.Policies = append(want.Policies, np.Policies...)
	}
	e.mu.Lock()
	have, known := e.applied[vni]
	e.mu.Unlock()
	if known && reflect.DeepEqual(have, want) {
		return nil
	}
	began := time.Now()
	if err := e.metrics.rewrite(ctx, vni, func() error { return e.sw.SetPolicy(ctx, want) }); err != nil {
		e.metrics.updates.WithLabelValues("error").Inc()
		return fmt.Errorf("setting the policy of network %d: %w", vni, err)
	}
	e.metrics.updates.WithLabelValues("ok").Inc()
	e.metrics.duration.Observe(time.Since(began).Seconds())
	e.mu.Lock()
	e.applied[vni] = want
	e.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Set the policy of a network", "vni", vni, "policies", len(want.Policies),
		"isolates", want.Isolates(), "duration", time.Since(began))
	return nil
}

// FromSpec returns the fabric's model of a NodeNetworkPolicy's spec.
func FromSpec(spec v1alpha1.NodeNetworkPolicySpec) (fabric.NetworkPolicy, error) {
	np := fabric.NetworkPolicy{VNI: spec.VNI}
	var errs []error
	for _, m := range spec.Policies {
		p := fabric.Policy{Name: m.Name, Ingress: m.Ingress, Egress: m.Egress}
		for _, s := range m.Selected {
			a, err := netip.ParseAddr(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("policy %s selects %q: %w", m.Name, s, err))
				continue
			}
			p.Selected = append(p.Selected, a)
		}
		var err error
		if p.IngressRules, err = rules(m.IngressRules); err != nil {
			errs = append(errs, fmt.Errorf("policy %s: %w", m.Name, err))
		}
		if p.EgressRules, err = rules(m.EgressRules); err != nil {
			errs = append(errs, fmt.Errorf("policy %s: %w", m.Name, err))
		}
		np.Policies = append(np.Policies, p)
	}
	if err := errors.Join(errs...); err != nil {
		return fabric.NetworkPolicy{}, err
	}
	if err := np.Validate(); err != nil {
		return fabric.NetworkPolicy{}, err
	}
	return np, nil
}

func rules(in []v1alpha1.PolicyRule) ([]fabric.Rule, error) {
	var out []fabric.Rule
	var errs []error
	for _, r := range in {
		fr := fabric.Rule{}
		for _, peer := range r.Peers {
			prefix, err := netip.ParsePrefix(peer.CIDR)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			fp := fabric.Peer{Prefix: prefix}
			for _, e := range peer.Except {
				ep, err := netip.ParsePrefix(e)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				fp.Except = append(fp.Except, ep)
			}
			fr.Peers = append(fr.Peers, fp)
		}
		for _, port := range r.Ports {
			if port.Port < 0 || port.Port > 65535 || port.EndPort < 0 || port.EndPort > 65535 {
				errs = append(errs, fmt.Errorf("port %d-%d is out of range", port.Port, port.EndPort))
				continue
			}
			fr.Ports = append(fr.Ports, fabric.Port{Protocol: fabric.Protocol(port.Protocol), Port: uint16(port.Port), EndPort: uint16(port.EndPort)})
		}
		out = append(out, fr)
	}
	return out, errors.Join(errs...)
}
