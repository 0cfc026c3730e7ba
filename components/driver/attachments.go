package driver

// This file creates and deletes the run's attachments: one create, the
// cruise phase's choice of a victim, one delete, and the final cleanup of
// everything the run labelled.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// record is what the driver knows of one attachment.
type record struct {
	name, node string
	network    *network
	phase      string
	created    time.Time // client time of the create call
	createDur  time.Duration
	// Latencies from the server's spec write, negative when not (yet) seen.
	addressed, ready, tested float64
	deleted                  bool
	deleteDur                time.Duration
	ipv4                     string
	// addrKey is the address (VNI/IP) it was last seen holding.
	addrKey string
	errs    []string
	// errKinds holds the kinds counted for it, each counted once.
	errKinds map[string]bool
}

func (r *record) hasErr(kind string) bool { return r.errKinds[kind] }

// create creates an attachment on network n, on a random node.
func (d *Driver) create(ctx context.Context, n *network) {
	d.mu.Lock()
	d.seq++
	name := fmt.Sprintf("%s-a%d", n.subnet, d.seq)
	phase := d.phase
	var peers []string
	if d.cfg.Ping {
		// The latest ready attachments of the network.
		for i := len(n.live) - 1; i >= 0 && len(peers) < d.cfg.PingPeers; i-- {
			if r := d.records[n.live[i]]; r != nil && r.ready >= 0 && r.ipv4 != "" {
				peers = append(peers, r.ipv4)
			}
		}
	}
	r := &record{name: name, network: n, phase: phase, addressed: -1, ready: -1, tested: -1, errKinds: map[string]bool{}}
	r.node = d.nodes[d.intN(len(d.nodes))]
	d.records[name] = r
	d.order = append(d.order, r)
	n.live = append(n.live, name)
	d.mu.Unlock()

	att := &v1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{RunLabel: d.cfg.RunID}},
		Spec:       v1alpha1.NetworkAttachmentSpec{Node: r.node, Subnet: n.subnet},
	}
	if d.cfg.Ping {
		att.Spec.PostCreateExec = postCreateExec(d.cfg.Shell, n.prefix, peers)
		att.Spec.PostDeleteExec = postDeleteExec(d.cfg.Shell)
	}
	start := time.Now()
	_, err := d.kos.NetworkV1alpha1().NetworkAttachments(d.namespace).Create(ctx, att, metav1.CreateOptions{})
	dur := time.Since(start)
	d.metrics.operations.WithLabelValues("create", phase).Inc()
	d.mu.Lock()
	defer d.mu.Unlock()
	r.created, r.createDur = start, dur
	d.creates[phase]++
	if err != nil {
		d.errorLocked(r, ErrCreate, err.Error())
		r.deleted = true
		n.live = slices.DeleteFunc(n.live, func(s string) bool { return s == name })
		return
	}
	d.metrics.create.WithLabelValues(phase).Observe(dur.Seconds())
	d.metrics.live.Inc()
}

// pickVictim removes a random live attachment from its network and returns
// its name and network ("" when none is left). It picks among those done
// (ready, tested when tests run, or failed) when there are any, so that
// churn does not cut short the latencies it measures.
func (d *Driver) pickVictim() (string, *network) {
	d.mu.Lock()
	defer d.mu.Unlock()
	type victim struct {
		n *network
		i int
	}
	var done, any []victim
	for _, n := range d.networks {
		for i, name := range n.live {
			any = append(any, victim{n, i})
			if r := d.records[name]; r != nil && d.doneLocked(r) {
				done = append(done, victim{n, i})
			}
		}
	}
	if len(done) == 0 {
		done = any
	}
	if len(done) == 0 {
		return "", nil
	}
	v := done[d.intN(len(done))]
	name := v.n.live[v.i]
	v.n.live = slices.Delete(v.n.live, v.i, v.i+1)
	return name, v.n
}

// liveNames removes every live attachment from its network and returns
// their names.
func (d *Driver) liveNames() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var names []string
	for _, n := range d.networks {
		names = append(names, n.live...)
		n.live = nil
	}
	return names
}

// delete deletes attachment name, already out of its network's live list.
func (d *Driver) delete(ctx context.Context, name string) {
	d.mu.Lock()
	phase := d.phase
	r := d.records[name]
	d.mu.Unlock()
	start := time.Now()
	err := d.kos.NetworkV1alpha1().NetworkAttachments(d.namespace).Delete(ctx, name, metav1.DeleteOptions{})
	dur := time.Since(start)
	d.metrics.operations.WithLabelValues("delete", phase).Inc()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deletes[phase]++
	if err != nil && !apierrors.IsNotFound(err) {
		d.errorLocked(r, ErrDelete, err.Error())
		return
	}
	r.deleted, r.deleteDur = true, dur
	d.metrics.delete.WithLabelValues(phase).Observe(dur.Seconds())
	d.metrics.live.Dec()
}

// cleanup deletes every attachment and subnet of the run and the namespace
// if the run made it, and waits until the attachments are gone (their
// agents ran their postDeleteExec by then, or will).
func (d *Driver) cleanup(ctx context.Context) error {
	if d.namespace == "" {
		return nil
	}
	sel := metav1.ListOptions{LabelSelector: RunLabel + "=" + d.cfg.RunID}
	atts := d.kos.NetworkV1alpha1().NetworkAttachments(d.namespace)
	var errs []error
	list, err := atts.List(ctx, sel)
	if err != nil {
		errs = append(errs, fmt.Errorf("listing the attachments left: %w", err))
	} else {
		for _, a := range list.Items {
			if err := atts.Delete(ctx, a.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("deleting attachment %s: %w", a.Name, err))
			}
		}
		if len(list.Items) > 0 {
			d.log.Info("Deleted the attachments left", "count", len(list.Items))
		}
	}
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		l, err := atts.List(ctx, sel)
		return err == nil && len(l.Items) == 0, nil
	}); err != nil {
		errs = append(errs, fmt.Errorf("waiting for the attachments to go: %w", err))
	}
	subnets := d.kos.NetworkV1alpha1().Subnets(d.namespace)
	if sl, err := subnets.List(ctx, sel); err != nil {
		errs = append(errs, fmt.Errorf("listing the subnets: %w", err))
	} else {
		for _, s := range sl.Items {
			if err := subnets.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("deleting subnet %s: %w", s.Name, err))
			}
		}
	}
	if d.createdNamespace {
		if err := d.kube.CoreV1().Namespaces().Delete(ctx, d.namespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting namespace %s: %w", d.namespace, err))
		}
	}
	return errors.Join(errs...)
}
