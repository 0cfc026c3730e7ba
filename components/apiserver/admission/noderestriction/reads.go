package noderestriction

import (
	"context"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/apiserver/registry"
)

// Attachments is the storage of NetworkAttachments' main endpoint with an
// agent's reads scoped to what its node needs; admission plugins never see
// reads, so the scope sits in the storage. Other users read as RBAC lets
// them.
//
// An agent may list and watch attachments only with a field selector that
// names its own node (spec.node), or a network in which its node has an
// attachment: status.addressVNI=V (in one namespace or in all), or
// spec.subnet=S in a namespace. It may get an attachment of its own node, or
// one whose network (namespace and status.addressVNI) holds an attachment of
// its node. It may read nothing without a node claim. This is what kos-agent
// asks for since 0.1.0: its node's attachments by spec.node across all
// namespaces, and per network status.addressVNI (with status.hostIP!= since
// 0.2.0) in the network's namespace.
type Attachments struct {
	*registry.REST
	agents sets.Set[string]
}

// ScopeReads returns the storage main with the reads of the given agent
// user names scoped to their nodes.
func ScopeReads(main *registry.REST, agents []string) *Attachments {
	return &Attachments{REST: main, agents: sets.New(agents...)}
}

// List lists attachments, if the user may list them by opts.
func (s *Attachments) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	if err := s.mayList(ctx, "list", opts); err != nil {
		return nil, err
	}
	return s.REST.List(ctx, opts)
}

// Watch watches attachments, if the user may list them by opts.
func (s *Attachments) Watch(ctx context.Context, opts *metainternalversion.ListOptions) (watch.Interface, error) {
	if err := s.mayList(ctx, "watch", opts); err != nil {
		return nil, err
	}
	return s.REST.Watch(ctx, opts)
}

// Get returns the attachment named name, if the user may read it.
func (s *Attachments) Get(ctx context.Context, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	obj, err := s.REST.Get(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	att, ok := obj.(*network.NetworkAttachment)
	if !ok {
		return nil, fmt.Errorf("unexpected object %T", obj)
	}
	agent, node, err := s.agent(ctx, "get")
	if agent == "" || err != nil {
		return obj, err
	}
	if att.Spec.Node == node {
		return obj, nil
	}
	vni := att.Status.AddressVNI
	if vni != 0 {
		in, err := s.nodeHas(ctx, node, att.Namespace, func(a *network.NetworkAttachment) bool { return a.Status.AddressVNI == vni })
		if err != nil || in {
			return obj, err
		}
	}
	return nil, apierrors.NewForbidden(network.Resource("networkattachments"), name,
		fmt.Errorf("agent %q of node %q may not get attachment %s/%s of node %q: node %q has no attachment in its network (namespace %s, VNI %d)",
			agent, node, att.Namespace, att.Name, att.Spec.Node, node, att.Namespace, vni))
}

// agent returns the user name and node of the agent that asks, or "" when
// the user is no agent; an agent without a node may read nothing.
func (s *Attachments) agent(ctx context.Context, verb string) (agent, node string, err error) {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok || !s.agents.Has(u.GetName()) {
		return "", "", nil
	}
	node = nodeOf(u)
	if node == "" {
		return u.GetName(), "", apierrors.NewForbidden(network.Resource("networkattachments"), "",
			fmt.Errorf("agent %q may %s NetworkAttachments only with a token bound to a pod on a node, but its credentials name no node (%s)",
				u.GetName(), verb, nodeClaim))
	}
	return u.GetName(), node, nil
}

// mayList returns why the user may not list or watch (verb) attachments by
// opts in the request's namespace, or nil when it may.
func (s *Attachments) mayList(ctx context.Context, verb string, opts *metainternalversion.ListOptions) error {
	agent, node, err := s.agent(ctx, verb)
	if agent == "" || err != nil {
		return err
	}
	namespace := genericapirequest.NamespaceValue(ctx)
	var selector fields.Selector = fields.Everything()
	if opts != nil && opts.FieldSelector != nil {
		selector = opts.FieldSelector
	}
	// The terms of a field selector are all required, so one that names
	// the agent's node or one of its networks is enough.
	var networks []func(*network.NetworkAttachment) bool
	for _, r := range selector.Requirements() {
		if r.Operator != selection.Equals && r.Operator != selection.DoubleEquals {
			continue
		}
		switch r.Field {
		case v1alpha1.FieldNode:
			if r.Value == node {
				return nil
			}
			return apierrors.NewForbidden(network.Resource("networkattachments"), "",
				fmt.Errorf("agent %q of node %q may not %s the attachments of node %q", agent, node, verb, r.Value))
		case v1alpha1.FieldAddressVNI:
			if vni, err := strconv.ParseUint(r.Value, 10, 32); err == nil && vni != 0 {
				networks = append(networks, func(a *network.NetworkAttachment) bool { return uint64(a.Status.AddressVNI) == vni })
			}
		case v1alpha1.FieldSubnet:
			if namespace != "" {
				networks = append(networks, func(a *network.NetworkAttachment) bool { return a.Spec.Subnet == r.Value })
			}
		}
	}
	for _, in := range networks {
		ok, err := s.nodeHas(ctx, node, namespace, in)
		if err != nil || ok {
			return err
		}
	}
	where := "all namespaces"
	if namespace != "" {
		where = "namespace " + namespace
	}
	return apierrors.NewForbidden(network.Resource("networkattachments"), "",
		fmt.Errorf("agent %q of node %q may %s NetworkAttachments only by a field selector %s=%s, or %s=<VNI> or (in a namespace) %s=<subnet> of a network in which node %q has an attachment; %q in %s names none",
			agent, node, verb, v1alpha1.FieldNode, node, v1alpha1.FieldAddressVNI, v1alpha1.FieldSubnet, node, selector.String(), where))
}

// nodeHas reports whether node has an attachment in namespace (all when
// "") for which keep is true. It reads the node's attachments, which the
// server's cache indexes by node: first as the cache holds them, which
// answers at once, then, only when that finds none, as a consistent list,
// so that an attachment the agent has seen is in it.
//
// The first read costs no round trip to etcd, where a consistent one asks
// etcd for its current revision and waits until the cache has caught up:
// every network informer of every agent starts with a list and a watch,
// each checked here. A cache a moment behind can still hold an attachment
// the node has just lost, and so allow a read that a consistent list would
// refuse; that read is one the agent could have made a moment earlier, and
// a watch is checked only when it starts in either case.
func (s *Attachments) nodeHas(ctx context.Context, node, namespace string, keep func(*network.NetworkAttachment) bool) (bool, error) {
	ctx = genericapirequest.WithNamespace(ctx, namespace)
	// A cache that cannot answer (one still filling, say) leaves the
	// question to the consistent list, as before the cache was read first.
	if cached, err := s.nodeAttachments(ctx, node, "0"); err == nil && anyOf(cached, keep) {
		return true, nil
	}
	current, err := s.nodeAttachments(ctx, node, "")
	if err != nil {
		return false, err
	}
	return anyOf(current, keep), nil
}

// anyOf reports whether keep is true of an attachment of list.
func anyOf(list *network.NetworkAttachmentList, keep func(*network.NetworkAttachment) bool) bool {
	for i := range list.Items {
		if keep(&list.Items[i]) {
			return true
		}
	}
	return false
}

// nodeAttachments lists the attachments of node in the context's namespace
// at resource version rv: "0" for whatever the cache holds, "" for a
// consistent list.
func (s *Attachments) nodeAttachments(ctx context.Context, node, rv string) (*network.NetworkAttachmentList, error) {
	obj, err := s.REST.List(ctx, &metainternalversion.ListOptions{
		ResourceVersion: rv,
		FieldSelector:   fields.OneTermEqualSelector(v1alpha1.FieldNode, node),
	})
	if err != nil {
		return nil, fmt.Errorf("listing the attachments of node %q: %w", node, err)
	}
	list, ok := obj.(*network.NetworkAttachmentList)
	if !ok {
		return nil, fmt.Errorf("listing the attachments of node %q: unexpected %T", node, obj)
	}
	return list, nil
}
