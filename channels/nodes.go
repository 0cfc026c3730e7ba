package channels

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kos-sdn/kos/channels/api"
)

// NeedsUpdateAnnotation marks a node for kOps's rolling update.
const NeedsUpdateAnnotation = "kops.k8s.io/needs-update"

// ControlPlaneLabel marks control-plane nodes.
const ControlPlaneLabel = "node-role.kubernetes.io/control-plane"

// markNodes annotates the nodes an addon update needs rolled:
// control-plane nodes, the others (workers), or all.
func (c *Client) markNodes(ctx context.Context, which api.NeedsRollingUpdate) error {
	var selector string
	switch which {
	case api.NeedsRollingUpdateControlPlane:
		selector = ControlPlaneLabel
	case api.NeedsRollingUpdateWorkers:
		selector = "!" + ControlPlaneLabel
	case api.NeedsRollingUpdateAll:
	default:
		return fmt.Errorf("needsRollingUpdate %q: want %s, %s or %s", which,
			api.NeedsRollingUpdateControlPlane, api.NeedsRollingUpdateWorkers, api.NeedsRollingUpdateAll)
	}
	nodes, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return fmt.Errorf("listing nodes to mark for a rolling update: %w", err)
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:""}}}`, NeedsUpdateAnnotation)
	for _, n := range nodes.Items {
		if _, ok := n.Annotations[NeedsUpdateAnnotation]; ok {
			continue
		}
		_, err := c.Kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("marking node %s for a rolling update: %w", n.Name, err)
		}
	}
	return nil
}
