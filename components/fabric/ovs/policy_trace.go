package ovs

import (
	"fmt"
	"strings"

	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs/policy"
)

// ExplainPolicy says what the policy of a traced packet's network did with
// it, naming the policies and rules of np by the flows the trace (what
// Trace returned for p) met: a heading line, then a sentence a line. np
// is the network's policy as the caller set it with SetPolicy; a policy
// that isolates nothing says so.
func ExplainPolicy(trace string, p Packet, np fabric.NetworkPolicy) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nPolicy of VNI %d on this node:\n", p.From.VNI)
	if np.VNI != p.From.VNI || !np.Isolates() {
		fmt.Fprintf(&b, "  No policy isolates an attachment of VNI %d on this node: nothing is checked here.\n", p.From.VNI)
		return b.String()
	}
	for _, line := range policy.Explain(trace, np, policyPipeline(policyCookie(np.VNI)), p.From.IP, p.To) {
		fmt.Fprintf(&b, "  %s\n", line)
	}
	return b.String()
}
