package install

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/blang/semver/v4"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kos-sdn/kos/channels/channel"
)

// Plan is what a run would do: for each addon the channels offer a release
// of that fits the cluster, the release, its install record, and the
// decision between them. Making a plan only reads the cluster.
type Plan struct {
	// ServerVersion is the cluster's version, pre-release and build dropped,
	// as kubernetesVersion ranges were matched against it.
	ServerVersion semver.Version
	// Items holds one entry per addon, sorted by name.
	Items []PlanItem
	// Unfit lists the addons the channels list but offer no release of
	// that fits the cluster (see Problems).
	Unfit []channel.NoFit

	// Options are what the plan was decided with; Apply decides again
	// with them once it holds the lease.
	Options DecideOptions
}

// PlanItem is the decision for one addon.
type PlanItem struct {
	// Addon is the release the channels offer.
	Addon *channel.Addon
	// Current is the install record on the cluster; nil when there is none
	// or it does not parse.
	Current *Record
	// Pending is the release a run started applying and did not finish,
	// with the kinds and namespaces its objects may be in; nil when there
	// is none.
	Pending *Pending
	// Decision says whether to apply Addon over Current.
	Decision Decision
}

// SharingSelector names the other addons of the plan whose selector equals
// a's.
func (p *Plan) SharingSelector(a *channel.Addon) []string {
	if len(a.Selector) == 0 {
		return nil
	}
	want := labels.SelectorFromSet(a.Selector).String()
	var out []string
	for _, it := range p.Items {
		if it.Addon.Name != a.Name && len(it.Addon.Selector) > 0 && labels.SelectorFromSet(it.Addon.Selector).String() == want {
			out = append(out, it.Addon.Name)
		}
	}
	return out
}

// Pending returns the items to apply.
func (p *Plan) Pending() []PlanItem {
	var out []PlanItem
	for _, it := range p.Items {
		if it.Decision.Apply {
			out = append(out, it)
		}
	}
	return out
}

// skipped reports whether an item is worth showing although it will not be
// applied: a newer release is refused, not merely up to date.
func (it PlanItem) skipped() bool {
	return !it.Decision.Apply && it.Decision.Reason != ReasonUpToDate
}

// HasRows reports whether WriteTable writes anything.
func (p *Plan) HasRows() bool {
	for _, it := range p.Items {
		if it.Decision.Apply || it.skipped() {
			return true
		}
	}
	return false
}

// WriteTable writes the plan as a table of the addons to apply and the ones
// refused (downgrades, records of a newer tool), with the installed and the
// offered release of each:
//
//	NAME     CURRENT           UPDATE
//	coredns  0.1.0 (k8s-1.29)  0.2.0 (k8s-1.29)
//	metrics  -                 1.0.0
//	old      2.0.0             1.0.0 skipped: downgrade refused
//	dns      1.0.0             1.0.0 (2.0.0 did not finish)
//
// Addons that are up to date are left out. It writes nothing when no row
// remains.
func (p *Plan) WriteTable(w io.Writer) error {
	if !p.HasRows() {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCURRENT\tUPDATE")
	for _, it := range p.Items {
		if !it.Decision.Apply && !it.skipped() {
			continue
		}
		current := "-"
		if it.Current != nil {
			current = channel.DescribeRelease(it.Current.Version, it.Current.ID)
		}
		update := channel.DescribeRelease(it.Addon.VersionString(), it.Addon.ID)
		if it.skipped() {
			update += " skipped: " + it.Decision.Reason
		}
		if it.Decision.Notable() {
			update += " (" + it.Decision.Reason + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", it.Addon.Name, current, update)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing plan: %w", err)
	}
	return nil
}
