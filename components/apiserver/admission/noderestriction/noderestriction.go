// Package noderestriction is kos-apiserver's admission plugin NodeRestriction:
// it limits what a node agent may write to the status of NetworkAttachments,
// as Kubernetes' NodeRestriction limits kubelets. An agent may write only the
// status of attachments on its own node, and there only the sections the agent
// owns (status.impl: macAddress, ifcName, hostIP, mtu, errors.host; and
// status.execReport: postCreateExecReport). The IPAM section belongs to the
// controller manager.
//
// An agent is a user named in the plugin's list of agent identities (by
// default the kos-agent ServiceAccount). Its node is the node claim of its
// credentials: kube-apiserver 1.30 and later put the node of a pod-bound
// service-account token in the user's extra authentication.kubernetes.io/node-name,
// and hand it on to kos-apiserver through TokenReview (direct clients) or the
// aggregator's X-Remote-Extra- headers. An agent whose credentials carry no
// node may write no status at all. Every other user is left to RBAC alone.
//
// Admission never sees reads, so the package also scopes an agent's reads
// of NetworkAttachments in their storage (Attachments, ScopeReads): to its
// node's attachments and those of the networks its node is in.
package noderestriction

import (
	"context"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apiserver/registry/networkattachment"
)

// PluginName is the name of the plugin in --enable-admission-plugins and
// --disable-admission-plugins.
const PluginName = "NodeRestriction"

// DefaultAgents are the agent identities when none are configured: the
// ServiceAccount kos-agent in the namespace kos-node, as the kos-agent addon
// creates it since 0.2.0, and in example-com, where 0.1.0 created it.
var DefaultAgents = []string{
	serviceaccount.MakeUsername("kos-node", "kos-agent"),
	serviceaccount.MakeUsername("example-com", "kos-agent"),
}

// nodeClaim is the key of the user's extra that names the node of a
// service-account token bound to a pod.
const nodeClaim = serviceaccount.NodeNameKey

// nodeOf returns the node that u's credentials name, or "" when they name
// none or more than one.
func nodeOf(u user.Info) string {
	nodes := u.GetExtra()[nodeClaim]
	if len(nodes) != 1 {
		return ""
	}
	return nodes[0]
}

// agentSections are the status sections an agent may write.
var agentSections = sets.New(network.SectionImpl, network.SectionExecReport)

// Plugin is the NodeRestriction admission plugin.
type Plugin struct {
	*admission.Handler
	agents sets.Set[string]
}

var _ admission.ValidationInterface = (*Plugin)(nil)

// New returns the plugin for the given agent user names. With none, it
// admits everything.
func New(agents []string) *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Update), agents: sets.New(agents...)}
}

// Register registers the plugin in plugins; agents is called when the plugin
// is made, after the command line is parsed.
func Register(plugins *admission.Plugins, agents func() []string) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return New(agents()), nil
	})
}

// Validate refuses a status write to a NetworkAttachment by an agent that is
// not on the attachment's node, or that changes a section the agent does not
// own.
func (p *Plugin) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != network.Resource("networkattachments") || a.GetSubresource() != "status" {
		return nil
	}
	att, ok := a.GetObject().(*network.NetworkAttachment)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("unexpected object %T", a.GetObject()))
	}
	old, ok := a.GetOldObject().(*network.NetworkAttachment)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("unexpected old object %T", a.GetOldObject()))
	}
	if err := Decide(p.agents, a.GetUserInfo(), att, old); err != nil {
		return admission.NewForbidden(a, err)
	}
	return nil
}

// Decide returns why u may not change the status of the attachment old into
// that of att, or nil when it may: users not in agents may; an agent may only
// with exactly one node claim, on att's node, and only in the sections it
// owns.
func Decide(agents sets.Set[string], u user.Info, att, old *network.NetworkAttachment) error {
	if u == nil || !agents.Has(u.GetName()) {
		return nil
	}
	name := old.Namespace + "/" + old.Name
	node := nodeOf(u)
	if node == "" {
		return fmt.Errorf("agent %q may write the status of attachment %s only with a token bound to a pod on node %q, but its credentials name no node (%s); give the agent a projected service-account token (Kubernetes 1.30 or later)",
			u.GetName(), name, old.Spec.Node, nodeClaim)
	}
	if node != old.Spec.Node {
		return fmt.Errorf("agent %q of node %q may not write the status of attachment %s, which is on node %q",
			u.GetName(), node, name, old.Spec.Node)
	}
	var foreign []string
	for _, sec := range networkattachment.ChangedStatusSections(&att.Status, &old.Status) {
		if !agentSections.Has(sec) {
			foreign = append(foreign, sec)
		}
	}
	if len(foreign) > 0 {
		return fmt.Errorf("agent %q of node %q may not change section %s of the status of attachment %s; it may change only %s",
			u.GetName(), node, strings.Join(foreign, ", "), name, strings.Join(sets.List(agentSections), " and "))
	}
	return nil
}
