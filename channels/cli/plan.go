package cli

import (
	"fmt"
	"io"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/channels/install"
	"github.com/kos-sdn/kos/channels/preview"
)

// planObject is one item of a plan as the printers see it: kind AddonUpdate,
// named after the addon, in its record namespace.
// objects is the dry-run of the addon's objects, nil when there is none.
func planObject(it channels.PlanItem, objects []channels.ObjectChange) *unstructured.Unstructured {
	a := it.Addon
	update := map[string]any{"manifest": a.Manifest}
	setIf(update, "version", a.VersionString())
	setIf(update, "id", a.ID)
	setIf(update, "channel", a.Channel)
	setIf(update, "manifestHash", a.ManifestHash)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": outputAPIVersion,
		"kind":       "AddonUpdate",
		"metadata":   map[string]any{"name": a.Name, "namespace": a.Namespace},
		"update":     update,
		"apply":      it.Decision.Apply,
		"reason":     it.Decision.Reason,
	}}
	if objects != nil {
		list := make([]any, len(objects))
		for i, ch := range objects {
			o := map[string]any{"action": string(ch.Action), "kind": ch.Kind.Kind, "name": ch.Name}
			setIf(o, "group", ch.Kind.Group)
			setIf(o, "namespace", ch.Namespace)
			setIf(o, "note", ch.Note)
			if len(ch.Takeovers) > 0 {
				var ts []any
				for _, t := range ch.Takeovers {
					m := map[string]any{"manager": t.Manager}
					if len(t.TakenOver) > 0 {
						m["takenOver"] = stringsToAny(t.TakenOver)
					}
					if len(t.Removed) > 0 {
						m["removed"] = stringsToAny(t.Removed)
					}
					ts = append(ts, m)
				}
				o["takeovers"] = ts
			}
			list[i] = o
		}
		u.Object["objects"] = list
	}
	if r := it.Current; r != nil {
		current := map[string]any{}
		setIf(current, "version", r.Version)
		setIf(current, "id", r.ID)
		setIf(current, "channel", r.Channel)
		setIf(current, "manifestHash", r.ManifestHash)
		u.Object["current"] = current
	}
	if p := it.Pending; p != nil && (p.Version != "" || p.ID != "" || p.ManifestHash != "") {
		pending := map[string]any{}
		setIf(pending, "version", p.Version)
		setIf(pending, "id", p.ID)
		setIf(pending, "channel", p.Channel)
		setIf(pending, "manifestHash", p.ManifestHash)
		u.Object["pending"] = pending
	}
	return u
}

func stringsToAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func setIf(m map[string]any, key, value string) {
	if value != "" {
		m[key] = value
	}
}

var planColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name"},
	{Name: "Current", Type: "string"},
	{Name: "Update", Type: "string"},
	{Name: "Namespace", Type: "string", Priority: 1},
	{Name: "Reason", Type: "string", Priority: 1},
	{Name: "Manifest", Type: "string", Priority: 1},
}

// planRows returns the items a plan table shows: those to apply, and those
// refused (downgrades, records of a newer tool). Up-to-date addons are left
// out.
func planRows(plan *channels.Plan) []channels.PlanItem {
	var out []channels.PlanItem
	for _, it := range plan.Items {
		if it.Decision.Apply || it.Decision.Reason != install.ReasonUpToDate {
			out = append(out, it)
		}
	}
	return out
}

// planTable is the table of a plan:
//
//	NAME       CURRENT            UPDATE
//	coredns    0.1.0 (k8s-1.29)   0.2.0 (k8s-1.29)
//	metrics    -                  1.0.0
//	old        2.0.0              1.0.0 skipped: downgrade refused
//	dns        1.0.0              1.0.0 (2.0.0 did not finish)
func planTable(items []channels.PlanItem, objs []*unstructured.Unstructured) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: planColumns}
	for i, it := range items {
		current := "-"
		if it.Current != nil {
			current = describeRelease(it.Current.Version, it.Current.ID)
		}
		update := describeRelease(it.Addon.VersionString(), it.Addon.ID)
		if !it.Decision.Apply {
			update += " skipped: " + it.Decision.Reason
		}
		if it.Decision.Notable() {
			update += " (" + it.Decision.Reason + ")"
		}
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells:  []any{it.Addon.Name, current, update, it.Addon.Namespace, it.Decision.Reason, it.Addon.Manifest},
			Object: runtimeObject(objs[i]),
		})
	}
	return t
}

// describeRelease shows a version and an id as "0.1.0 (k8s-1.29)"; a release
// without a version (kOps writes such records) shows as "unversioned".
func describeRelease(version, id string) string {
	if version == "" {
		version = "unversioned"
	}
	if id == "" {
		return version
	}
	return version + " (" + id + ")"
}

// writeObjectPlan writes, after the plan table, what each pending addon
// does to its objects, one line each, with the fields it takes from other
// field managers (or removes for them) below the object, and with diff the
// unified diff of each object that changes:
//
//	coredns: update Deployment.apps kube-system/coredns
//	  takes over .spec.replicas from kubectl-edit
//	coredns: unchanged ConfigMap kube-system/coredns
//	  takes over .data.Corefile, .metadata.labels.k8s-addon from kops
//	  removes .data.old, owned by kops, which the release does not set
//	coredns: prune Service kube-system/old
func writeObjectPlan(w io.Writer, plan *channels.Plan, previews map[string]channels.AddonPreview, diff bool) error {
	fmt.Fprintln(w)
	for _, it := range plan.Pending() {
		for _, ch := range previews[it.Addon.Name].Objects {
			line := fmt.Sprintf("%s: %s %s", it.Addon.Name, ch.Action, ch)
			if ch.Note != "" {
				line += " (" + ch.Note + ")"
			}
			fmt.Fprintln(w, line)
			for _, t := range ch.Takeovers {
				if len(t.TakenOver) > 0 {
					fmt.Fprintf(w, "  takes over %s from %s\n", listFields(t.TakenOver), t.Manager)
				}
				if len(t.Removed) > 0 {
					fmt.Fprintf(w, "  removes %s, owned by %s, which the release does not set\n", listFields(t.Removed), t.Manager)
				}
			}
			if !diff || ch.Action == preview.ActionUnchanged {
				continue
			}
			d, err := ch.Diff()
			if err != nil {
				return err
			}
			fmt.Fprint(w, d)
		}
	}
	return nil
}

// maxListedFields is how many field paths a takeover line names before it
// counts the rest.
const maxListedFields = 5

// listFields names field paths: ".a, .b and 3 more".
func listFields(paths []string) string {
	if len(paths) <= maxListedFields {
		return strings.Join(paths, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(paths[:maxListedFields], ", "), len(paths)-maxListedFields)
}
