package channels

import (
	"context"
	"fmt"

	"github.com/kos-sdn/kos/channels/channel"
	"github.com/kos-sdn/kos/channels/install"
)

// Deciding is package install's: it reads install records and weighs a
// channel's release against them. These are the names a program that
// embeds channels meets on the way from Plan to Apply.
type (
	// Plan is what a run would do (install.Plan).
	Plan = install.Plan
	// PlanItem is the decision for one addon (install.PlanItem).
	PlanItem = install.PlanItem
	// Decision says whether to apply a release, and why (install.Decision).
	Decision = install.Decision
	// DecideOptions tune the decisions of a plan (install.DecideOptions).
	DecideOptions = install.DecideOptions
	// Record is what is installed of one addon (install.Record).
	Record = install.Record
	// Installed is one install record found on the cluster
	// (install.Installed).
	Installed = install.Installed
	// AddonError is why one addon failed (install.AddonError).
	AddonError = install.AddonError
	// BlockedError names the addons a plan leaves behind their channels
	// (install.BlockedError).
	BlockedError = install.BlockedError
	// BlockedAddon is an addon a plan leaves behind its channels
	// (install.BlockedAddon).
	BlockedAddon = install.BlockedAddon
)

// AnnotationPrefix prefixes the install record annotation of an addon on
// its record namespace (install.AnnotationPrefix).
const AnnotationPrefix = install.AnnotationPrefix

// IdentityLabel is stamped, with the addon's name as value, on every object
// an addon applies (install.IdentityLabel).
const IdentityLabel = install.IdentityLabel

// Plan reads the cluster's version and the install records of the addons,
// and decides for each addon whether to apply the newest of releases that
// fits the cluster. It makes one request for the version and one GET per
// record namespace, and writes nothing.
func (c *Client) Plan(ctx context.Context, releases []*Addon) (*Plan, error) {
	return c.PlanWith(ctx, releases, DecideOptions{})
}

// PlanWith is Plan deciding with opts, such as allowing downgrades.
func (c *Client) PlanWith(ctx context.Context, releases []*Addon, opts DecideOptions) (*Plan, error) {
	info, err := c.Kube.Discovery().ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("reading the server version: %w", err)
	}
	version, err := ServerVersion(info.GitVersion)
	if err != nil {
		return nil, err
	}
	selected := Select(releases, version)
	opts.Offered = channel.Fitting(releases, version)
	items := make([]PlanItem, len(selected))
	for i, a := range selected {
		items[i] = PlanItem{Addon: a}
	}
	if err := c.decide(ctx, items, opts); err != nil {
		return nil, err
	}
	return &Plan{ServerVersion: version, Items: items, Unfit: channel.Unfit(releases, version), Options: opts}, nil
}

// decide reads the install records and pending releases of items and sets
// their Current, Pending and Decision.
func (c *Client) decide(ctx context.Context, items []PlanItem, opts DecideOptions) error {
	namespaces := make([]string, len(items))
	for i, it := range items {
		namespaces[i] = it.Addon.Namespace
	}
	rs, err := install.ReadRecords(ctx, c.Kube, namespaces)
	if err != nil {
		return err
	}
	versions := install.NewRecordVersions()
	for i := range items {
		a := items[i].Addon
		items[i].Current = versions.Fill(ctx, a.Name, rs.Record(a.Namespace, a.Name))
		items[i].Pending = rs.Pending(a.Namespace, a.Name)
		c.weigh(ctx, &items[i], versions, opts)
	}
	return nil
}
