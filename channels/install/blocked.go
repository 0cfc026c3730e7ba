package install

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/kos-sdn/kos/channels/channel"
)

// AddonError is why one addon failed, or is blocked.
type AddonError struct {
	// Addon names the addon.
	Addon string
	// Err says what failed: the objects the server refused, a manifest
	// that did not verify, a prune or record write that failed.
	Err error
}

// BlockedError names the addons a plan leaves behind their channels until
// someone acts: no release fits the cluster (NoFit), a jump the release
// does not allow, a rollback a daemon does not make on its own. The other
// addons are planned (and applied) as usual.
type BlockedError struct {
	Blocked []AddonError
}

// Error names every blocked addon and why, on one line.
func (e *BlockedError) Error() string {
	parts := make([]string, len(e.Blocked))
	for i, b := range e.Blocked {
		parts[i] = fmt.Sprintf("addon %q: %v", b.Addon, b.Err)
	}
	noun := "addon is"
	if len(e.Blocked) > 1 {
		noun = "addons are"
	}
	return fmt.Sprintf("%d %s left behind the channels: %s", len(e.Blocked), noun, strings.Join(parts, "; "))
}

// Unwrap returns the reasons of the blocked addons.
func (e *BlockedError) Unwrap() []error {
	errs := make([]error, len(e.Blocked))
	for i, b := range e.Blocked {
		errs[i] = b.Err
	}
	return errs
}

// Problems returns a *BlockedError naming the addons the plan leaves behind
// its channels, sorted by name, or nil when there is none.
func (p *Plan) Problems() error {
	all := p.Blocked()
	if len(all) == 0 {
		return nil
	}
	errs := make([]AddonError, len(all))
	for i, b := range all {
		errs[i] = AddonError{Addon: b.Name, Err: b.Err}
	}
	return &BlockedError{Blocked: errs}
}

// The kinds of blocked addons, as the metric channels_addon_blocked and the
// reasons of the daemon's Events name them.
const (
	blockedNoFit    = "NoReleaseFits"
	blockedPath     = "UpgradePathRefused"
	blockedRollback = "RollbackRefused"
)

// BlockedAddon is an addon a plan leaves behind its channels until
// someone acts.
type BlockedAddon struct {
	// Name is the addon's, Namespace its record's.
	Name, Namespace string
	// Kind is why, as the metric channels_addon_blocked and the daemon's
	// Events name it: NoReleaseFits, UpgradePathRefused or
	// RollbackRefused.
	Kind string
	Err  error
}

// Blocked lists the addons the plan leaves behind its channels, sorted by
// name.
func (p *Plan) Blocked() []BlockedAddon {
	var out []BlockedAddon
	for _, n := range p.Unfit {
		ns := channel.DefaultNamespace
		if len(n.Releases) > 0 {
			ns = n.Releases[0].Namespace
		}
		out = append(out, BlockedAddon{Name: n.Name, Namespace: ns, Kind: blockedNoFit, Err: n})
	}
	for _, it := range p.Items {
		if !it.Decision.Blocked {
			continue
		}
		kind := blockedPath
		if strings.HasPrefix(it.Decision.Reason, ReasonRollbackRefused) {
			kind = blockedRollback
		}
		out = append(out, BlockedAddon{Name: it.Addon.Name, Namespace: it.Addon.Namespace, Kind: kind, Err: errors.New(it.Decision.Reason)})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
