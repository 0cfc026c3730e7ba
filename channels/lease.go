package channels

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/channels/lease"
)

// withLease runs fn while holding the channels Lease (lease.Hold), creating
// its namespace first if need be, and reports taking, waiting for and
// releasing it to r.
func (c *Client) withLease(ctx context.Context, identity string, r *reporter, fn func(context.Context) error) error {
	if err := c.ensureNamespace(ctx, lease.Namespace); err != nil {
		return err
	}
	hooks := lease.Hooks{
		Acquired: func() {
			r.report(EventLocked, "", "Acquired lease %s/%s", lease.Namespace, lease.Name)
		},
		Waiting: func(holder string) {
			r.report(EventWaiting, "", "Waiting for another run (%s) to release lease %s/%s", holder, lease.Namespace, lease.Name)
		},
		Released: func() {
			r.report(EventUnlocked, "", "Released lease %s/%s", lease.Namespace, lease.Name)
		},
	}
	return lease.Hold(ctx, c.Kube, identity, hooks, fn)
}

// ensureNamespace creates a namespace unless it exists.
func (c *Client) ensureNamespace(ctx context.Context, name string) error {
	_, err := c.Kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading namespace %s: %w", name, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	_, err = c.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{FieldManager: FieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}
