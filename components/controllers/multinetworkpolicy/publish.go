package multinetworkpolicy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/multinetworkpolicy/v1beta1"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/policymodel"
)

// concurrentWrites is how many NodeNetworkPolicy writes of one namespace
// publish has in flight at most.
const concurrentWrites = 16

// publish brings the NodeNetworkPolicies of the namespace named by ref (its
// Name) to the model of the namespace's policies: one per network of the
// namespace and node where some policy isolates an attachment, none
// elsewhere. A namespace is the unit because a network (a VNI) lives in
// one namespace, and so do the pods that have interfaces on it: its
// policies, selected attachments and selected peers are all there.
func (c *Controller) publish(ctx context.Context, ref cache.ObjectName) error {
	ns := ref.Name
	in, err := c.namespaceInput(ns)
	if err != nil {
		return err
	}
	ours := map[uint32]bool{}
	for _, s := range in.Subnets {
		if s.Namespace == ns {
			ours[s.Spec.VNI] = true
		}
	}
	want := map[string]v1alpha1.NodeNetworkPolicySpec{}
	for vni, nodes := range policymodel.Build(in).Networks {
		if !ours[vni] {
			continue
		}
		for node, np := range nodes {
			if np.Isolates() {
				want[policymodel.NodePolicyName(vni, node)] = policymodel.NodeSpec(node, np)
			}
		}
	}
	have, err := c.nodePolicies.NodeNetworkPolicies(ns).List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing NodeNetworkPolicies of %s from the cache: %w", ns, err)
	}
	client := c.kos.NetworkV1alpha1().NodeNetworkPolicies(ns)
	logger := klog.FromContext(ctx)
	// The writes go out together: one per node, and each node's agent
	// waits for its own, so that written one after the other the last
	// node would wait for every other's round trip.
	var writes []func() error
	for _, p := range have {
		spec, ok := want[p.Name]
		delete(want, p.Name)
		switch {
		case !ok:
			writes = append(writes, func() error {
				err := client.Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
				if err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("deleting NodeNetworkPolicy %s/%s: %w", ns, p.Name, err)
				}
				logger.V(2).Info("Deleted a NodeNetworkPolicy", "nodeNetworkPolicy", klog.KObj(p))
				return nil
			})
		case !equality.Semantic.DeepEqual(p.Spec, spec):
			// The cache's object is shared: change a copy.
			p = p.DeepCopy()
			p.Spec = spec
			writes = append(writes, func() error {
				if _, err := client.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
					return fmt.Errorf("updating NodeNetworkPolicy %s/%s: %w", ns, p.Name, err)
				}
				logger.V(2).Info("Updated a NodeNetworkPolicy", "nodeNetworkPolicy", klog.KObj(p), "policies", len(spec.Policies))
				return nil
			})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		p := &v1alpha1.NodeNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: want[name]}
		writes = append(writes, func() error {
			if _, err := client.Create(ctx, p, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating NodeNetworkPolicy %s/%s: %w", ns, name, err)
			}
			logger.V(2).Info("Created a NodeNetworkPolicy", "nodeNetworkPolicy", klog.KObj(p), "policies", len(p.Spec.Policies))
			return nil
		})
	}
	errs := make([]error, len(writes))
	slots := make(chan struct{}, concurrentWrites)
	var wg sync.WaitGroup
	for i, write := range writes {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			errs[i] = write()
		})
	}
	wg.Wait()
	errs = slices.DeleteFunc(errs, func(err error) bool { return err == nil })
	if len(errs) > 0 {
		return fmt.Errorf("publishing the policies of namespace %s: %w", ns, errors.Join(errs...))
	}
	return nil
}

// namespaceInput returns what the model of namespace ns's policies reads:
// its policies, pods and attachments, and every namespace, definition and
// subnet. Policies that do not read are left out; sync tells of them.
func (c *Controller) namespaceInput(ns string) (policymodel.Input, error) {
	objs, err := c.policies.ByNamespace(ns).List(labels.Everything())
	if err != nil {
		return policymodel.Input{}, fmt.Errorf("listing MultiNetworkPolicies of %s from the cache: %w", ns, err)
	}
	var policies []*v1beta1.MultiNetworkPolicy
	for _, obj := range objs {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if p, err := v1beta1.FromUnstructured(u); err == nil {
			policies = append(policies, p)
		}
	}
	in, err := c.input(ns)
	in.Policies = policies
	return in, err
}
