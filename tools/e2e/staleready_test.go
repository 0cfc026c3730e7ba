package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/poll"
)

// awaitReadiness waits until every attachment of standardNamespace on node
// has its Ready condition at status, and, when status is Unknown, the
// reason the attachment liveness controller gives (its node's agent does
// not renew its heartbeat Lease); the attachments of the other nodes must
// stay Ready meanwhile. It writes figure name, the time since since.
func (s *standard) awaitReadiness(t *testing.T, node string, status metav1.ConditionStatus, since time.Time, timeout time.Duration, name string) {
	t.Helper()
	poll.Until(t, timeout, fmt.Sprintf("the attachments on %s to be Ready=%s, the others Ready", node, status), func(ctx context.Context) error {
		atts, err := s.network.NetworkV1alpha1().NetworkAttachments(standardNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		mine := 0
		for _, a := range atts.Items {
			ready := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.NetworkAttachmentReady)
			if ready == nil {
				return fmt.Errorf("attachment %s has no Ready condition", a.Name)
			}
			if a.Spec.Node != node {
				if ready.Status != metav1.ConditionTrue {
					t.Errorf("attachment %s on %s, whose agent runs, is Ready=%s (%s: %s)", a.Name, a.Spec.Node, ready.Status, ready.Reason, ready.Message)
				}
				continue
			}
			mine++
			if ready.Status != status {
				return fmt.Errorf("attachment %s is Ready=%s (%s)", a.Name, ready.Status, ready.Reason)
			}
			if status == metav1.ConditionUnknown && ready.Reason != v1alpha1.ReasonAgentNotHeartbeating {
				t.Errorf("attachment %s is Ready=Unknown for %s: %s, want reason %s", a.Name, ready.Reason, ready.Message, v1alpha1.ReasonAgentNotHeartbeating)
			}
		}
		if mine == 0 {
			return fmt.Errorf("no attachment on %s", node)
		}
		return nil
	})
	figures.Duration(t, name, time.Since(since))
}
