package driver

// This file follows the attachments through the informer: the latencies
// from the server's write times, the check that no two hold one address,
// errors, when the run has settled, and the progress lines.

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// errorLocked counts an error of a kind for r, once per kind.
func (d *Driver) errorLocked(r *record, kind, msg string) {
	if r.errKinds[kind] {
		return
	}
	r.errKinds[kind] = true
	r.errs = append(r.errs, kind+": "+msg)
	d.errCount[kind]++
	d.metrics.errors.WithLabelValues(kind).Inc()
	d.log.V(2).Info("Error", "attachment", r.name, "kind", kind, "message", msg)
}

// observe takes in what the informer says of an attachment.
func (d *Driver) observe(att *v1alpha1.NetworkAttachment) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.records[att.Name]
	if r == nil {
		return // created by an earlier driver of the same run ID, or its create call has not returned
	}
	writes := att.ExtendedMetadata.Writes
	spec, ok := writes.Time(v1alpha1.SectionSpec)
	if !ok {
		return
	}
	since := func(section string) (float64, bool) {
		t, ok := writes.Time(section)
		if !ok {
			return 0, false
		}
		return t.Sub(spec.Time).Seconds(), true
	}
	st := &att.Status
	if len(st.Errors.IPAM) > 0 {
		d.errorLocked(r, ErrAddress, st.Errors.IPAM[0])
	}
	if len(st.Errors.Host) > 0 {
		d.errorLocked(r, ErrHost, st.Errors.Host[0])
	}
	if st.IPv4 != "" && r.addressed < 0 {
		if s, ok := since(v1alpha1.SectionAddress); ok {
			r.addressed = s
			d.metrics.toAddress.WithLabelValues(r.phase).Observe(s)
		}
	}
	key := ""
	if st.IPv4 != "" {
		key = fmt.Sprintf("%d/%s", st.AddressVNI, st.IPv4)
	}
	r.ipv4 = st.IPv4
	if key != r.addrKey {
		d.releaseLocked(att.Name, r.addrKey)
		r.addrKey = key
		if key != "" {
			if holder, taken := d.holders[key]; taken && holder != att.Name {
				d.errorLocked(r, ErrDuplicate, fmt.Sprintf("address %s is also held by %s", key, holder))
				if h := d.records[holder]; h != nil {
					d.errorLocked(h, ErrDuplicate, fmt.Sprintf("address %s is also held by %s", key, att.Name))
				}
			} else {
				d.holders[key] = att.Name
			}
		}
	}
	if st.HostIP != "" && len(st.Errors.Host) == 0 && r.ready < 0 {
		if s, ok := since(v1alpha1.SectionImpl); ok {
			r.ready = s
			d.metrics.toReady.WithLabelValues(r.phase).Observe(s)
		}
	}
	if rep := st.PostCreateExecReport; rep != nil && r.tested < 0 && !r.hasErr(ErrTest) {
		if rep.ExitStatus != 0 {
			d.errorLocked(r, ErrTest, fmt.Sprintf("%q exited with status %d: %s", rep.Command, rep.ExitStatus, rep.StdErr))
		} else if s, ok := since(v1alpha1.SectionExecReport); ok {
			r.tested = s
			d.metrics.toTested.WithLabelValues(r.phase).Observe(s)
		}
	}
}

// forget takes in an attachment's deletion.
func (d *Driver) forget(att *v1alpha1.NetworkAttachment) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r := d.records[att.Name]; r != nil {
		d.releaseLocked(att.Name, r.addrKey)
		r.addrKey = ""
	}
}

// releaseLocked forgets that name holds address key.
func (d *Driver) releaseLocked(name, key string) {
	if key != "" && d.holders[key] == name {
		delete(d.holders, key)
	}
}

// done reports whether r got as far as it will: ready, and tested when
// tests run, or failed.
func (d *Driver) doneLocked(r *record) bool {
	if len(r.errs) > 0 {
		return true
	}
	if r.ready < 0 {
		return false
	}
	return !d.cfg.Ping || r.tested >= 0
}

// waitSettled waits until every live attachment is done, or until the
// oldest undone one is ReadyTimeout old; then it counts the undone as
// timeouts.
func (d *Driver) waitSettled(ctx context.Context) error {
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, r := range d.order {
			if !r.deleted && !d.doneLocked(r) && time.Since(r.created) < d.cfg.ReadyTimeout {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range d.order {
		if !r.deleted && !d.doneLocked(r) {
			d.errorLocked(r, ErrTimeout, fmt.Sprintf("not done %s after its creation", d.cfg.ReadyTimeout))
		}
	}
	return nil
}

// progress prints a line every Progress period.
func (d *Driver) progress(ctx context.Context) {
	if d.cfg.Progress <= 0 {
		return
	}
	start := time.Now()
	ticker := time.NewTicker(d.cfg.Progress)
	defer ticker.Stop()
	lastCreates, lastDeletes := 0, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		d.mu.Lock()
		creates, deletes, live, addressed, ready, tested, errs := 0, 0, 0, 0, 0, 0, 0
		for _, c := range d.creates {
			creates += c
		}
		for _, c := range d.deletes {
			deletes += c
		}
		for _, r := range d.order {
			if !r.deleted {
				live++
			}
			if r.addressed >= 0 {
				addressed++
			}
			if r.ready >= 0 {
				ready++
			}
			if r.tested >= 0 {
				tested++
			}
		}
		for _, c := range d.errCount {
			errs += c
		}
		phase, created := d.phase, len(d.order)
		d.mu.Unlock()
		period := d.cfg.Progress.Seconds()
		fmt.Fprintf(d.cfg.Out, "%6.1fs %-9s created %d, live %d, addressed %d, ready %d, tested %d, errors %d; %.1f creates/s, %.1f deletes/s\n",
			time.Since(start).Seconds(), phase, created, live, addressed, ready, tested, errs,
			float64(creates-lastCreates)/period, float64(deletes-lastDeletes)/period)
		lastCreates, lastDeletes = creates, deletes
	}
}
