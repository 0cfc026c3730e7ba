package multinetworkpolicy

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/multinetworkpolicy/v1beta1"
	"github.com/kos-sdn/kos/components/policymodel"
)

// Reasons of the Events the controller records on MultiNetworkPolicies.
const (
	// ReasonApplied is the reason of the Normal event of a policy that
	// governs KOS networks: which, and how many pods it selects on them.
	ReasonApplied = "Applied"
	// ReasonNotHonoured is the reason of the Warning event that lists what
	// of a policy KOS cannot honour or read.
	ReasonNotHonoured = "NotHonoured"
	// ReasonInvalid is the reason of the Warning event of a policy that
	// does not read as a MultiNetworkPolicy.
	ReasonInvalid = "InvalidPolicy"
)

// told is what the Events of one incarnation of a policy said.
type told struct {
	uid     types.UID
	applied string
	// problems is the message of the NotHonoured event, "" for none.
	problems string
}

// sync tells, in Events on the policy named by ref, what it applies to, when
// that changed since it last told.
func (c *Controller) sync(ctx context.Context, ref cache.ObjectName) error {
	key := ref.String()
	obj, err := c.policies.ByNamespace(ref.Namespace).Get(ref.Name)
	if apierrors.IsNotFound(err) {
		c.mu.Lock()
		delete(c.told, key)
		c.mu.Unlock()
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading MultiNetworkPolicy %s from the cache: %w", key, err)
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("MultiNetworkPolicy %s in the cache is a %T", key, obj)
	}
	policy, err := v1beta1.FromUnstructured(u)
	if err != nil {
		// It stays unreadable until it changes, which queues it again.
		c.tell(ctx, key, u, told{uid: u.GetUID(), problems: err.Error()}, ReasonInvalid)
		return nil
	}
	in, err := c.input(policy.Namespace)
	if err != nil {
		return err
	}
	in.Policies = []*v1beta1.MultiNetworkPolicy{policy}
	r := policymodel.Build(in).Reports[key]
	now := told{uid: policy.UID, problems: strings.Join(r.Problems, " ")}
	if len(r.Networks) > 0 {
		now.applied = applied(r)
	}
	c.tell(ctx, key, u, now, ReasonNotHonoured)
	return nil
}

// applied is the message of a policy's Applied event.
func applied(r policymodel.Report) string {
	nets := make([]string, len(r.Networks))
	for i, vni := range r.Networks {
		nets[i] = fmt.Sprint(vni)
	}
	network := "network"
	if len(nets) > 1 {
		network = "networks"
	}
	pods := "pods"
	if r.Pods == 1 {
		pods = "pod"
	}
	return fmt.Sprintf("Applies to %d %s on %s (KOS %s %s).", r.Pods, pods, strings.Join(r.Definitions, ", "), network, strings.Join(nets, ", "))
}

// tell records the Events of what now says that differ from what the
// controller last told of the policy; problems go under reason.
func (c *Controller) tell(ctx context.Context, key string, policy *unstructured.Unstructured, now told, reason string) {
	c.mu.Lock()
	before, ok := c.told[key]
	c.told[key] = now
	c.mu.Unlock()
	if ok && before == now {
		return
	}
	if !ok || before.uid != now.uid {
		before = told{}
	}
	if now.applied != "" && now.applied != before.applied {
		c.recorder.Event(policy, corev1.EventTypeNormal, ReasonApplied, now.applied)
	}
	if now.problems != "" && now.problems != before.problems {
		c.recorder.Event(policy, corev1.EventTypeWarning, reason, now.problems)
	}
	klog.FromContext(ctx).V(2).Info("Told what a MultiNetworkPolicy applies to", "policy", key, "applied", now.applied, "problems", now.problems)
}

// input returns the cluster state that the policies of namespace ns read,
// without the policies: every namespace, definition and subnet, but only
// the pods and attachments of ns. The others cannot count: a policy
// governs KOS networks of its own namespace only (KOS gives interfaces on a
// definition to pods of the definition's namespace), so the attachments on
// them, and the pods they belong to, its peers included, are all of that
// namespace.
func (c *Controller) input(ns string) (policymodel.Input, error) {
	var in policymodel.Input
	var err error
	if in.Pods, err = c.pods.Pods(ns).List(labels.Everything()); err != nil {
		return in, fmt.Errorf("listing pods from the cache: %w", err)
	}
	if in.Attachments, err = c.attachments.NetworkAttachments(ns).List(labels.Everything()); err != nil {
		return in, fmt.Errorf("listing attachments from the cache: %w", err)
	}
	if in.Namespaces, err = c.namespaces.List(labels.Everything()); err != nil {
		return in, fmt.Errorf("listing namespaces from the cache: %w", err)
	}
	if in.Subnets, err = c.subnets.List(labels.Everything()); err != nil {
		return in, fmt.Errorf("listing subnets from the cache: %w", err)
	}
	defs, err := c.definitions.List(labels.Everything())
	if err != nil {
		return in, fmt.Errorf("listing NetworkAttachmentDefinitions from the cache: %w", err)
	}
	for _, d := range defs {
		if u, ok := d.(*unstructured.Unstructured); ok {
			in.Definitions = append(in.Definitions, u)
		}
	}
	return in, nil
}
