package agent_test

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// readyCondition returns a check that an attachment's Ready condition,
// which the server derives from what IPAM and the agent write, has status
// and reason.
func (a *api) readyCondition(name string, status metav1.ConditionStatus, reason string) func(context.Context) error {
	return func(ctx context.Context) error {
		att, err := a.client.NetworkV1alpha1().NetworkAttachments(a.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(att.Status.Conditions, v1alpha1.NetworkAttachmentReady)
		if c == nil {
			return fmt.Errorf("%s has no Ready condition", name)
		}
		if c.Status != status || c.Reason != reason {
			return fmt.Errorf("%s is Ready=%s (%s: %s), want Ready=%s (%s)", name, c.Status, c.Reason, c.Message, status, reason)
		}
		return nil
	}
}
