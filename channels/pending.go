package channels

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/channels/install"
)

// weigh decides for one item of a plan. A pending release that a run
// applied in full (Pending.Applied) but whose wait ended before its objects
// were ready may have become ready since: when the item's release is that
// release, or would go back from it, weigh checks its objects, and when
// they are all there and ready it marks the pending release Ready and,
// unless opts allow going back (AllowDowngrade), weighs that release
// instead of the channels' one, so that the plan completes it (records it)
// rather than rolling back something that works.
func (c *Client) weigh(ctx context.Context, it *PlanItem, rv *install.RecordVersions, opts DecideOptions) {
	p := it.Pending
	if p.NamesRelease() && p.Applied && (p.Is(it.Addon) || install.GoesBack(it.Addon, p)) {
		if rel := c.readyRelease(ctx, rv, it.Addon.Name, p, opts.Offered); rel != nil {
			ready := *p
			ready.Ready = true
			it.Pending = &ready
			if !opts.AllowDowngrade {
				it.Addon = rel
			}
		}
	}
	it.Decision = install.Decide(it.Addon, it.Current, it.Pending, opts)
}

// readyRelease returns the release pending release p names, found among
// offered or else in the channel p names, when every object of it is there
// and ready now; nil otherwise, and when it cannot tell (the channel or the
// manifest cannot be read): then the release counts as failed.
func (c *Client) readyRelease(ctx context.Context, rv *install.RecordVersions, name string, p *install.Pending, offered []*Addon) *Addon {
	logger := klog.FromContext(ctx)
	var rel *Addon
	for _, list := range [][]*Addon{offered, nil} {
		if list == nil && p.Channel != "" {
			list = rv.Load(ctx, name, p.Channel)
		}
		for _, a := range list {
			if a.Name == name && p.Is(a) {
				rel = a
				break
			}
		}
		if rel != nil {
			break
		}
	}
	if rel == nil {
		logger.V(1).Info("Cannot find the pending release to check whether it became ready", "addon", name, "release", p.Release(), "channel", p.Channel)
		return nil
	}
	notReady, err := c.notReady(ctx, rv.Fetcher, rel)
	if err != nil {
		logger.V(1).Info("Cannot check whether the pending release became ready", "addon", name, "release", p.Release(), "err", err)
		return nil
	}
	if notReady != "" {
		logger.V(2).Info("Pending release is not ready", "addon", name, "release", p.Release(), "object", notReady)
		return nil
	}
	return rel
}

// notReady reads every object of release a and returns the first that is
// missing or not ready, as the readiness gate computes it; "" when all are
// there and ready.
func (c *Client) notReady(ctx context.Context, f *Fetcher, a *Addon) (string, error) {
	objs, err := releaseObjects(ctx, f, a)
	if err != nil {
		return "", err
	}
	w := &addonWriter{client: c, parallelism: defaultParallelism}
	rel, err := w.prepare(ctx, objs)
	if err != nil {
		return "", err
	}
	found := make([]string, len(objs))
	err = w.each(ctx, len(objs), func(ctx context.Context, i int) error {
		u := objs[i]
		key := keyOf(u)
		t := rel.ready[u]
		if t == nil {
			// A kind the manifest's own CRDs define.
			mapping, err := c.mapping(ctx, u.GroupVersionKind(), false)
			if err != nil {
				found[i] = key.String() + " (kind not served)"
				return nil
			}
			t = &target{obj: u, key: key, mapping: mapping}
		}
		live, err := resourceFor(c.Dynamic, t.mapping.Resource, key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			found[i] = key.String() + " (missing)"
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", key, err)
		}
		ready, msg, err := w.readiness(ctx, live)
		switch {
		case err != nil:
			// kstatus found it Failed, or its status cannot be read.
			found[i] = err.Error()
		case !ready:
			found[i] = key.String() + " (" + msg + ")"
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	for _, s := range found {
		if s != "" {
			return s, nil
		}
	}
	return "", nil
}
