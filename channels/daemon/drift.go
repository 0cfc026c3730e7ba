package daemon

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/channels/install"
)

// DriftMode says what a daemon does with an object of an installed addon
// that someone changed or deleted.
type DriftMode string

// The drift modes.
const (
	// DriftRepair re-applies the object.
	DriftRepair DriftMode = "repair"
	// DriftReport changes nothing: it posts a Kubernetes Event on the
	// object (reason Drifted) and sets the metric channels_drifted_object
	// for it, until a new release is applied or the edit is undone.
	DriftReport DriftMode = "report"
	// DriftOff does not check.
	DriftOff DriftMode = "off"
)

// DefaultDrift is the drift mode of a daemon that names none: report, which
// keeps kOps's promise that "a user can edit a deployed addon, and changes
// will not be replaced, until a new version", and still tells who watches
// events or metrics which objects differ from their release.
const DefaultDrift = DriftReport

// ParseDriftMode reads a drift mode, as --drift and DriftAnnotation give it.
func ParseDriftMode(s string) (DriftMode, error) {
	switch m := DriftMode(s); m {
	case DriftRepair, DriftReport, DriftOff:
		return m, nil
	}
	return "", fmt.Errorf("drift mode %q: want repair, report or off", s)
}

// DriftAnnotation, on an object of a manifest, sets the drift mode of that
// object ("repair", "report" or "off"), whatever the daemon's: "off" opts
// an object out of repair (and of reports), "repair" opts it in.
const DriftAnnotation = "channels.kos.example.com/drift"

// driftMode is the drift mode of a manifest's object: its DriftAnnotation,
// else the daemon's. An annotation that does not parse is ignored.
func driftMode(u *unstructured.Unstructured, daemon DriftMode) DriftMode {
	if m, err := ParseDriftMode(u.GetAnnotations()[DriftAnnotation]); err == nil {
		return m
	}
	return daemon
}

// DriftResult is what one drift check did.
type DriftResult struct {
	// Full is set when every object was re-applied, not only the ones
	// whose metadata changed.
	Full bool
	// Checked counts the objects checked.
	Checked int
	// Changed and Deleted count the objects found changed or deleted by
	// someone else, and re-applied.
	Changed, Deleted int
	// Reported counts the objects found changed or deleted, newly, and
	// reported instead of repaired (DriftReport).
	Reported int
}

// driftState remembers, per installed addon, the objects its release
// applies and how each looked after the last apply: enough to find, with
// one metadata list per kind and namespace, the objects someone changed or
// deleted. It is only used from the daemon's goroutine.
type driftState struct {
	addons  map[string]*addonDrift
	metrics *Metrics
}

// addonDrift is what the drift check knows of one addon.
type addonDrift struct {
	// release identifies the release the state is of.
	release string
	// targets are the release's objects, ready to apply again.
	targets []*channels.Object
	// seen holds each object's fingerprint after the last apply, or, for
	// an object whose drift is reported, after the last look at it.
	seen map[channels.ObjectKey]string
	// reported holds the objects whose drift is reported and not undone,
	// with how they drifted ("changed", "deleted" or "controller") and by
	// whom (see reportDrift).
	reported map[channels.ObjectKey]string
}

func newDriftState(m *Metrics) *driftState {
	return &driftState{addons: map[string]*addonDrift{}, metrics: m}
}

// forget drops what is known of an addon, so that the next check looks at
// all its objects again, and clears the metrics of its reported drift: a
// new release was applied, or the release changed.
func (s *driftState) forget(addon string) {
	if st := s.addons[addon]; st != nil && s.metrics != nil {
		for key, reported := range st.reported {
			s.metrics.setDrifted(addon, key, driftLabel(reported), false)
		}
	}
	delete(s.addons, addon)
}

// releaseOf identifies a release for the drift state.
func releaseOf(a *channels.Addon) string {
	return a.Name + "\x00" + a.VersionString() + "\x00" + a.ID + "\x00" + a.ManifestHash + "\x00" + a.Manifest
}

// checkDrift checks the objects of every addon the plan finds up to date
// for drift, and repairs or reports it as each object's drift mode says
// (driftMode; DriftOff in the daemon's options checks nothing). It runs in
// three steps: findDrift works out which objects to look at again,
// inspectDrift looks at them, reports what is to be reported and plans
// the repairs (planRepair), and repairDrift re-applies, under the channels
// Lease, what is to be repaired. The decisions are pure functions
// (upToDate, changedTargets, lookMode, planRepair, repairOutcome), each
// unit-tested; the steps only read, write and count.
func (d *Daemon) checkDrift(ctx context.Context, plan *channels.Plan, full bool) (DriftResult, error) {
	res := DriftResult{Full: full}
	if d.opts.Drift == DriftOff {
		return res, nil
	}
	looks, errs := d.findDrift(ctx, upToDate(plan), full, &res)
	repairs, ierrs := d.inspectDrift(ctx, looks, &res)
	errs = append(errs, ierrs...)
	if len(repairs) > 0 {
		errs = append(errs, d.repairDrift(ctx, repairs, &res)...)
	}
	return res, errors.Join(errs...)
}

// driftLook is what a drift check looks at again of one addon.
type driftLook struct {
	item  channels.PlanItem
	state *addonDrift
	// targets are the objects to look at (findDrift), or to re-apply
	// (inspectDrift's answer).
	targets []*channels.Object
	// listed holds what the metadata lists found; nil when they failed.
	listed map[channels.ObjectKey]listedObject
}

// upToDate is the plan's addons that are installed as the channel has
// them: the ones whose objects may have drifted from their release.
func upToDate(plan *channels.Plan) []channels.PlanItem {
	var current []channels.PlanItem
	for _, it := range plan.Items {
		if !it.Decision.Apply && it.Decision.Reason == install.ReasonUpToDate {
			current = append(current, it)
		}
	}
	return current
}

// findDrift works out, without the Lease, which objects of the up-to-date
// addons to look at again. An addon checked for the first time (or again
// after an apply), and every addon when full is set, has all its objects
// looked at, and its state starts afresh (keeping what is reported of the
// same release). Otherwise findDrift lists the addon's objects' metadata,
// one list per kind and namespace, by the addon's channels.IdentityLabel, and picks the
// objects that changedTargets finds changed or gone.
func (d *Daemon) findDrift(ctx context.Context, current []channels.PlanItem, full bool, res *DriftResult) ([]driftLook, []error) {
	var looks []driftLook
	var errs []error
	for _, it := range current {
		a := it.Addon
		st := d.drift.addons[a.Name]
		if full || st == nil || st.release != releaseOf(a) {
			targets, err := d.client.Objects(ctx, d.opts.Apply.Fetcher, it.Addon)
			if err != nil {
				errs = append(errs, fmt.Errorf("addon %q: %w", a.Name, err))
				continue
			}
			reported := map[channels.ObjectKey]string{}
			if st != nil && st.release == releaseOf(a) {
				reported = st.reported
			} else {
				d.drift.forget(a.Name)
			}
			st = &addonDrift{release: releaseOf(a), targets: targets, seen: map[channels.ObjectKey]string{}, reported: reported}
			d.drift.addons[a.Name] = st
			res.Checked += len(targets)
			// Every object is looked at; what the lists find tells which
			// repairs repaired drift, for the counts. A failed list only
			// leaves the counts out.
			listed, err := d.listFingerprints(ctx, a.Name, st)
			if err != nil {
				klog.FromContext(ctx).V(1).Info("Listing for the drift counts failed", "addon", a.Name, "err", err)
				listed = nil
			}
			looks = append(looks, driftLook{item: it, state: st, targets: targets, listed: listed})
			continue
		}
		listed, err := d.listFingerprints(ctx, a.Name, st)
		if err != nil {
			errs = append(errs, fmt.Errorf("addon %q: %w", a.Name, err))
			continue
		}
		res.Checked += len(st.targets)
		if changed := changedTargets(st, listed); len(changed) > 0 {
			looks = append(looks, driftLook{item: it, state: st, targets: changed, listed: listed})
		}
	}
	return looks, errs
}

// changedTargets is the objects of an addon whose fingerprint in listed
// differs from the one last seen, or that listed lacks.
func changedTargets(st *addonDrift, listed map[channels.ObjectKey]listedObject) []*channels.Object {
	var changed []*channels.Object
	for _, t := range st.targets {
		got, ok := listed[t.Key]
		switch {
		case t.Key.IsNamespace():
			// Several addons may declare one Namespace, so it carries the
			// labels of whichever applied it last: only its deletion is
			// drift, or the addons would take it from each other on every
			// pass.
			if !ok {
				changed = append(changed, t)
			}
		case !ok || got.fingerprint != st.seen[t.Key]:
			changed = append(changed, t)
		}
	}
	return changed
}

// lookMode is the drift mode of an object to look at again (driftMode),
// and whether to inspect it: an object in DriftOff is left alone, and one
// created only (channels.CreateOnlyAnnotation) that is to be repaired and still
// exists has nothing to repair.
func lookMode(t *channels.Object, daemon DriftMode, present bool) (DriftMode, bool) {
	mode := driftMode(t.Obj, daemon)
	switch {
	case mode == DriftOff:
		return mode, false
	case mode == DriftRepair && channels.CreateOnly(t.Obj) && present:
		return mode, false
	}
	return mode, true
}

// planRepair decides, for what inspect found of an object in drift mode
// repair, what to report and what to re-apply: what people changed is
// reverted, what controllers set is reported and left to them. It returns
// the finding to report (its how is "" when no controller set anything)
// and the target to re-apply: t itself, t without the controllers'
// fields, or nil when there is nothing of a person's to revert.
func planRepair(t *channels.Object, f driftFinding) (driftFinding, *channels.Object, error) {
	report := driftFinding{how: f.how, controllers: f.controllers, live: f.live}
	if len(f.controllers) == 0 {
		report.how = ""
	}
	switch {
	case f.how == "" || f.byController():
		return report, nil, nil
	case len(f.controllers) > 0:
		managers := sets.New[string]()
		for _, o := range f.controllers {
			managers.Insert(o.Manager)
		}
		obj, err := channels.WithoutFieldsOf(t.Obj, f.live, managers)
		if err != nil {
			return report, nil, fmt.Errorf("%s: %w", t.Key, err)
		}
		return report, &channels.Object{Obj: obj, Key: t.Key, Mapping: t.Mapping}, nil
	}
	return report, t, nil
}

// inspectDrift looks at the objects findDrift picked, reports the drift of
// those in drift mode report (and the controllers' part of those in
// repair), and returns what is to be re-applied. It needs no Lease: it
// only reads, dry-runs and posts Events.
func (d *Daemon) inspectDrift(ctx context.Context, looks []driftLook, res *DriftResult) ([]driftLook, []error) {
	var repairs []driftLook
	var errs []error
	for _, lk := range looks {
		var fix []*channels.Object
		name := lk.item.Addon.Name
		for _, t := range lk.targets {
			listed, present := lk.listed[t.Key]
			mode, look := lookMode(t, d.opts.Drift, present)
			if !look {
				if mode != DriftOff {
					lk.state.seen[t.Key] = listed.fingerprint
				}
				continue
			}
			f, err := d.inspect(ctx, t)
			if err != nil {
				errs = append(errs, fmt.Errorf("addon %q: %w", name, err))
				continue
			}
			report, repair := f, (*channels.Object)(nil)
			if mode == DriftRepair {
				report, repair, err = planRepair(t, f)
				if err != nil {
					errs = append(errs, fmt.Errorf("addon %q: %w", name, err))
				}
			}
			reported, err := d.reportDrift(ctx, name, lk.state, t, report)
			res.Reported += reported
			if err != nil {
				errs = append(errs, fmt.Errorf("addon %q: %w", name, err))
			}
			if repair != nil {
				fix = append(fix, repair)
				if len(f.people) > 0 {
					klog.FromContext(ctx).V(1).Info("Object changed by hand; repairing it", "addon", name, "object", t.Key.String(), "people", describeOwners(f.people))
				}
			}
		}
		if len(fix) > 0 {
			lk.targets = fix
			repairs = append(repairs, lk)
		}
	}
	return repairs, errs
}

// repairOutcome says what re-applying an object repaired, for the counts
// and notes: "deleted" when the lists did not find it, "changed" when the
// apply changed it (its resourceVersion moved), "" when it repaired
// nothing, or when the lists failed (listed is nil). A Namespace only
// drifts by being deleted (see changedTargets).
func repairOutcome(listed map[channels.ObjectKey]listedObject, key channels.ObjectKey, out *unstructured.Unstructured) string {
	if listed == nil {
		return ""
	}
	before, ok := listed[key]
	switch {
	case !ok:
		return "deleted"
	case key.IsNamespace():
		return ""
	case out.GetResourceVersion() != before.resourceVersion:
		// A change the apply leaves alone, such as a controller's
		// annotation, is no drift.
		return "changed"
	}
	return ""
}

// repairDrift re-applies, holding the channels Lease, the objects
// inspectDrift found to repair; an object created only is created again.
// It skips an addon another run updated since the plan was made, and
// forgets the state of an addon whose repair failed, so that the next
// check looks at all of it again.
func (d *Daemon) repairDrift(ctx context.Context, repairs []driftLook, res *DriftResult) []error {
	var errs []error
	note := func(addon, format string, args ...any) {
		if d.opts.Apply.OnEvent != nil {
			d.opts.Apply.OnEvent(channels.Event{Type: channels.EventNote, Addon: addon, Message: fmt.Sprintf(format, args...)})
		}
	}
	err := d.client.WithLease(ctx, d.opts.Apply.Identity, d.opts.Apply.OnEvent, func(ctx context.Context) error {
		items := make([]channels.PlanItem, len(repairs))
		for i := range repairs {
			items[i] = repairs[i].item
		}
		if err := d.client.Redecide(ctx, items, d.decideOptions()); err != nil {
			return err
		}
		for i, rp := range repairs {
			name := rp.item.Addon.Name
			if items[i].Decision.Apply || items[i].Decision.Reason != install.ReasonUpToDate {
				d.drift.forget(name)
				continue
			}
			err := d.client.Reapply(ctx, rp.targets, d.opts.Apply.Parallelism, func(t *channels.Object, out *unstructured.Unstructured) {
				switch how := repairOutcome(rp.listed, t.Key, out); how {
				case "deleted":
					res.Deleted++
					note(name, "Repaired %s: it was deleted", t.Key)
				case "changed":
					res.Changed++
					note(name, "Repaired %s: it was changed", t.Key)
				}
				rp.state.seen[t.Key] = fingerprint(out)
			})
			if err != nil {
				d.drift.forget(name)
				errs = append(errs, fmt.Errorf("addon %q: repairing drift: %w", name, err))
			}
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	return errs
}
