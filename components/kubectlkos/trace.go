package kubectlkos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/agent/api"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"

	"github.com/kos-sdn/kos/internal/cmdline"
)

func newTraceCommand(o *options) *cobra.Command {
	var req api.TraceRequest
	cmd := &cobra.Command{
		Use:   "trace ATTACHMENT --to IP",
		Short: "Trace a packet from an attachment through its node's switch (OVS ofproto/trace)",
		Long: `Trace what the Open vSwitch of an attachment's node does with a packet the
attachment sends to --to: the agent of that node builds the packet from the
attachment's port, MAC and IPv4 address (an ICMP echo request by default, or
TCP, UDP or an ARP request) and runs ofproto/trace on its bridge. A packet for
another node's attachment leaves by the tunnel (set_field:...->tun_dst); one
for an address nobody in the network holds is dropped. Then the agent names
what the network's MultiNetworkPolicies did with the packet on that node: the
policy and rule that let it out or in, or the policies that isolate the
attachment where no rule allowed it (agents of 0.4.0 and later).

The request goes to the agent through a port-forward of the kube-apiserver,
which needs get (WebSockets) and create (SPDY) on pods/portforward in the agents' namespace, with your
credentials, for which the agent asks the cluster for create on
nodes/kos-debug of its node (agents before 0.4.0: create on pods/proxy).`,
		Example: `  kubectl kos trace a1 --to 10.1.0.7 -n tenant-a
  kubectl kos trace a1 --to 10.1.0.7 --protocol tcp --port 443 -n tenant-a`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return cmdline.UsageErrorf(cmd, "give one attachment name, got %d arguments", len(args))
			}
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			req.Namespace, req.Name = ns, args[0]
			if req.To == "" {
				return cmdline.UsageErrorf(cmd, "--to is required: the IPv4 address the packet is for")
			}
			if err := req.Validate(); err != nil {
				return cmdline.UsageErrorf(cmd, "%v", err)
			}
			c, err := o.clients()
			if err != nil {
				return err
			}
			return trace(cmd.Context(), o.agents(c), c.kos, req, o.streams.Out)
		},
	}
	cmd.Flags().StringVar(&req.To, "to", "", "The IPv4 address the packet is for, in the attachment's network")
	cmd.Flags().StringVar(&req.Protocol, "protocol", api.ProtocolICMP, "The packet: icmp (an echo request), tcp, udp or arp (a request for --to)")
	cmd.Flags().IntVar(&req.Port, "port", 0, "The destination port of tcp and udp")
	return cmd
}

// trace finds the node of the attachment req names and has that node's
// agent trace the packet, writing the trace to out.
func trace(ctx context.Context, ag *agents, kos kosclient.Interface, req api.TraceRequest, out io.Writer) error {
	att, err := kos.NetworkV1alpha1().NetworkAttachments(req.Namespace).Get(ctx, req.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("attachment %s not found in namespace %s", req.Name, req.Namespace)
	}
	if err != nil {
		return fmt.Errorf("getting attachment %s/%s: %w", req.Namespace, req.Name, err)
	}
	if att.Status.IPv4 == "" {
		return fmt.Errorf("attachment %s/%s has no address yet (its Ready condition says why)", req.Namespace, req.Name)
	}
	pod, err := ag.onNode(ctx, att.Spec.Node)
	if err != nil {
		return err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	trace, err := ag.post(ctx, pod, api.PathTrace, body)
	if err != nil {
		return fmt.Errorf("tracing on node %s (agent %s): %w", att.Spec.Node, pod.Name, err)
	}
	fmt.Fprintf(out, "Attachment %s/%s (%s, VNI %d) on node %s, traced by agent %s:\n", req.Namespace, req.Name, att.Status.IPv4, att.Status.AddressVNI, att.Spec.Node, pod.Name)
	_, err = out.Write(trace)
	return err
}
