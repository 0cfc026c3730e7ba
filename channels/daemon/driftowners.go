package daemon

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/dynamic"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/channels/preview"
)

// IsPerson reports whether a field manager is a person's tool, whose
// changes drift repair reverts: kubectl in all its forms (kubectl,
// kubectl-edit, kubectl-patch, kubectl-client-side-apply, kubectl-scale,
// kubectl-label, ...), k9s, and the dashboards. Every other manager is a
// controller (an HPA's scaling as kube-controller-manager, cert-manager's
// cainjector filling a caBundle), whose fields drift repair leaves as they
// are and only reports.
func IsPerson(manager string) bool {
	return strings.HasPrefix(manager, "kubectl") || people.Has(manager)
}

// people are the field managers besides kubectl's that IsPerson knows.
var people = sets.New("k9s", "kubernetes-dashboard", "dashboard", "headlamp", "lens", "Mozilla")

// fieldOwner is a field of a release that another manager owns now: that
// manager changed it since the release was applied.
type fieldOwner struct {
	Manager string
	// Field is the field's path as the API server names it
	// (.spec.replicas).
	Field string
}

// driftFinding is what looking at one object of an installed addon found.
// Finding is kept apart from repairing: inspect only reads and dry-runs.
type driftFinding struct {
	// how is "" (no drift), "deleted" or "changed".
	how string
	// people and controllers are the fields of the release that other
	// managers own now, split by IsPerson. A change with neither was
	// made by no manager that now owns a field of the release (a field
	// removed), and counts as a person's.
	people, controllers []fieldOwner
	// live is the object as read; nil when deleted.
	live *unstructured.Unstructured
}

// byController reports whether the object changed only in fields
// controllers own now.
func (f driftFinding) byController() bool {
	return f.how == "changed" && len(f.controllers) > 0 && len(f.people) == 0
}

// describe says who changed what, for Events and logs:
// "kubectl-edit: .data.key; kube-controller-manager: .spec.replicas".
func describeOwners(owners []fieldOwner) string {
	byManager := map[string][]string{}
	var managers []string
	for _, o := range owners {
		if _, ok := byManager[o.Manager]; !ok {
			managers = append(managers, o.Manager)
		}
		byManager[o.Manager] = append(byManager[o.Manager], o.Field)
	}
	sort.Strings(managers)
	parts := make([]string, len(managers))
	for i, m := range managers {
		fields := byManager[m]
		sort.Strings(fields)
		parts[i] = m + ": " + strings.Join(fields, ", ")
	}
	return strings.Join(parts, "; ")
}

// inspect reads the object of t and finds whether, and by whom, it
// drifted from its release: deleted, or changed. A change is found by
// applying the release's object without force, as a dry run: the server
// answers with a conflict for each field of the release another manager
// owns now (someone changed it, which moved it to them), naming the
// manager; an apply without conflict that would still change the object
// finds a change by no known manager. Namespaces and objects created only
// (channels.CreateOnlyAnnotation) drift only by being deleted.
func (d *Daemon) inspect(ctx context.Context, t *channels.Object) (driftFinding, error) {
	var ri dynamic.ResourceInterface = d.client.Dynamic.Resource(t.Mapping.Resource)
	if t.Key.Namespace != "" {
		ri = d.client.Dynamic.Resource(t.Mapping.Resource).Namespace(t.Key.Namespace)
	}
	live, err := ri.Get(ctx, t.Key.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return driftFinding{how: "deleted"}, nil
	case err != nil:
		return driftFinding{}, fmt.Errorf("reading %s to check for drift: %w", t.Key, err)
	case live.GetDeletionTimestamp() != nil:
		return driftFinding{how: "deleted"}, nil
	}
	f := driftFinding{live: live}
	if t.Key.IsNamespace() || channels.CreateOnly(t.Obj) {
		return f, nil
	}
	merged, err := ri.Apply(ctx, t.Key.Name, t.Obj, metav1.ApplyOptions{FieldManager: channels.FieldManager, DryRun: []string{metav1.DryRunAll}})
	if apierrors.IsConflict(err) {
		owners, perr := conflictOwners(err)
		if perr != nil {
			return driftFinding{}, fmt.Errorf("applying %s (dry run) to check for drift: %w", t.Key, perr)
		}
		f.how = "changed"
		for _, o := range owners {
			if IsPerson(o.Manager) {
				f.people = append(f.people, o)
			} else {
				f.controllers = append(f.controllers, o)
			}
		}
		return f, nil
	}
	if err != nil {
		return driftFinding{}, fmt.Errorf("applying %s (dry run) to check for drift: %w", t.Key, err)
	}
	if preview.Differs(live, merged) {
		f.how = "changed"
	}
	return f, nil
}

// conflictManager reads the manager out of the message of a field manager
// conflict: `conflict with "kubectl-edit" using v1`.
var conflictManager = regexp.MustCompile(`conflict with "([^"]*)"`)

// conflictOwners reads the fields and managers of the conflicts of a
// server-side apply.
func conflictOwners(err error) ([]fieldOwner, error) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return nil, err
	}
	var out []fieldOwner
	for _, c := range status.Status().Details.Causes {
		if c.Type != metav1.CauseTypeFieldManagerConflict {
			continue
		}
		m := conflictManager.FindStringSubmatch(c.Message)
		if m == nil {
			return nil, fmt.Errorf("unexpected conflict %q", c.Message)
		}
		out = append(out, fieldOwner{Manager: m[1], Field: c.Field})
	}
	if len(out) == 0 {
		return nil, err
	}
	return out, nil
}
