package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// state is what the agent remembers between syncs: what it put on the
// fabric, where each attachment was last synced, its local attachments and
// the networks it watches. Every method takes the one mutex itself, so no
// caller ever holds it; while holding it a method starts or stops network
// informers and sets gauges, and calls nothing else of the agent's.
type state struct {
	metrics *metrics
	// newInformer returns an informer, not yet running, on the attachments
	// of a network.
	newInformer func(network) (cache.SharedIndexInformer, error)
	// informers tracks the goroutines of the network informers.
	informers sync.WaitGroup

	mu sync.Mutex
	// installed is what the agent believes the fabric holds, by address;
	// owned indexes it by owner. Workers and full reconciles both record
	// here what they program, so that the sync of an attachment that moved
	// or went finds every address the fabric holds for it, whichever of
	// them programmed it.
	installed map[address]placement
	owned     map[string][]address
	// keyAddress holds the address each attachment was last synced at, so
	// that the address is settled again once the attachment moves or goes.
	keyAddress map[string]address
	// locals holds what a deleted local attachment needs to clean up
	// after it: its postDeleteExec.
	locals map[string]localRecord
	// reports holds the reports of postCreateExec runs, until the
	// attachment is gone.
	reports map[string]*pendingReport
	// relevance tells which networks have local attachments; networks
	// holds the informers that watch those networks.
	relevance *relevance
	networks  map[network]*networkInformer
}

// networkInformer watches the attachments of one relevant network.
type networkInformer struct {
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	// started is when the agent started watching the network.
	started time.Time
}

func newState(m *metrics, newInformer func(network) (cache.SharedIndexInformer, error)) *state {
	return &state{
		metrics:     m,
		newInformer: newInformer,
		installed:   map[address]placement{},
		owned:       map[string][]address{},
		keyAddress:  map[string]address{},
		locals:      map[string]localRecord{},
		reports:     map[string]*pendingReport{},
		relevance:   newRelevance(),
		networks:    map[network]*networkInformer{},
	}
}

// addressesOf returns the addresses the attachment key may have left
// something at: the one it was last synced at, and those the fabric holds
// for it. A full reconcile programs attachments no worker has synced yet,
// and moves those whose address changed since their last sync.
func (s *state) addressesOf(key string) []address {
	s.mu.Lock()
	defer s.mu.Unlock()
	addrs := slices.Clone(s.owned[key])
	if addr, ok := s.keyAddress[key]; ok && !slices.Contains(addrs, addr) {
		addrs = append(addrs, addr)
	}
	return addrs
}

// synced records the address the attachment key was synced at (none when
// has is false), and returns what the agent remembers of key as a local
// attachment whose interface it made.
func (s *state) synced(key string, addr address, has bool) (localRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if has {
		s.keyAddress[key] = addr
	} else {
		delete(s.keyAddress, key)
	}
	rec, ok := s.locals[key]
	return rec, ok
}

// installedAt returns what the fabric holds at addr.
func (s *state) installedAt(addr address) placement {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.installed[addr]
}

// setInstalled records what the fabric holds at addr.
func (s *state) setInstalled(addr address, p placement) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setInstalledLocked(addr, p)
}

// replaceInstalled records after as all the fabric holds, and returns what
// was recorded before.
func (s *state) replaceInstalled(after map[address]placement) map[address]placement {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.installed
	s.installed = map[address]placement{}
	s.owned = map[string][]address{}
	s.metrics.localAtts.Set(0)
	s.metrics.remoteAtts.Set(0)
	for addr, p := range after {
		s.setInstalledLocked(addr, p)
	}
	return old
}

// setInstalledLocked records what the fabric holds at addr and keeps the
// gauges. s.mu is held.
func (s *state) setInstalledLocked(addr address, p placement) {
	old := s.installed[addr]
	if old.owner != "" {
		s.owned[old.owner] = slices.DeleteFunc(s.owned[old.owner], func(a address) bool { return a == addr })
		if len(s.owned[old.owner]) == 0 {
			delete(s.owned, old.owner)
		}
	}
	if p.kind == absent {
		delete(s.installed, addr)
	} else {
		s.installed[addr] = p
		if p.owner != "" {
			s.owned[p.owner] = append(s.owned[p.owner], addr)
		}
	}
	s.countKind(old.kind, -1)
	s.countKind(p.kind, 1)
}

func (s *state) countKind(k kind, delta float64) {
	switch k {
	case local:
		s.metrics.localAtts.Add(delta)
	case remote:
		s.metrics.remoteAtts.Add(delta)
	}
}

// setLocal remembers a local attachment whose interface is ready.
func (s *state) setLocal(key string, rec localRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.locals[key] = rec
}

// report returns the postCreateExec report kept for key, if any.
func (s *state) report(key string) *pendingReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reports[key]
}

// setReport keeps the postCreateExec report of key.
func (s *state) setReport(key string, r *pendingReport) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reports[key] = r
}

// finishReport records the report of the postCreateExec run that started
// set off, unless the attachment was forgotten or started again since; it
// reports whether it did.
func (s *state) finishReport(key string, started *pendingReport, report *v1alpha1.ExecReport) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reports[key] != started {
		return false
	}
	s.reports[key] = &pendingReport{uid: started.uid, report: report}
	return true
}

// forgetLocal forgets the local attachment key, of UID uid, and its report.
func (s *state) forgetLocal(key, uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.locals, key)
	if r := s.reports[key]; r != nil && string(r.uid) == uid {
		delete(s.reports, key)
	}
}

// networkInformers returns the informers of the networks that match.
func (s *state) networkInformers(match func(network) bool) []cache.SharedIndexInformer {
	s.mu.Lock()
	defer s.mu.Unlock()
	var infs []cache.SharedIndexInformer
	for n, ni := range s.networks {
		if match(n) {
			infs = append(infs, ni.informer)
		}
	}
	return infs
}

// watchedSince returns when the agent started watching network n, and
// whether it watches it.
func (s *state) watchedSince(n network) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ni, ok := s.networks[n]
	if !ok {
		return time.Time{}, false
	}
	return ni.started, true
}

// networksSynced reports whether every network informer has synced.
func (s *state) networksSynced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ni := range s.networks {
		if !ni.informer.HasSynced() {
			return false
		}
	}
	return true
}

// syncedNetworks returns the informers of the networks that have synced,
// and the VNIs of those that have not.
func (s *state) syncedNetworks() ([]cache.SharedIndexInformer, sets.Set[uint32]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var synced []cache.SharedIndexInformer
	unsynced := sets.New[uint32]()
	for n, ni := range s.networks {
		if ni.informer.HasSynced() {
			synced = append(synced, ni.informer)
		} else {
			unsynced.Insert(n.vni)
		}
	}
	return synced, unsynced
}

// setRelevance records the network of a local attachment (in is false when
// it has none) and starts or stops network informers as networks become
// relevant or irrelevant. A network's informer runs on ctx, which must last
// as long as the agent runs, until the network stops being relevant. It
// returns the keys of the attachments that a stopped informer leaves behind:
// their syncs must remove them from the fabric and forget them.
func (s *state) setRelevance(ctx context.Context, key string, n network, in bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	gained, lost := s.relevance.set(key, n, in)
	var orphans []string
	if lost.vni != 0 {
		orphans = s.stopNetworkLocked(ctx, lost)
	}
	if gained.vni != 0 {
		s.startNetworkLocked(ctx, gained)
	}
	return orphans
}

// startNetworkLocked starts watching the attachments of network n. Its
// initial list enqueues every attachment of n. s.mu is held.
func (s *state) startNetworkLocked(ctx context.Context, n network) {
	inf, err := s.newInformer(n)
	if err != nil {
		// Only a stopped informer refuses a handler: this cannot happen
		// to a new one.
		utilruntime.HandleErrorWithContext(ctx, err, "Watching a network failed", "network", n)
		return
	}
	infCtx, cancel := context.WithCancel(ctx)
	s.networks[n] = &networkInformer{informer: inf, cancel: cancel, started: time.Now()}
	s.informers.Go(func() { inf.RunWithContext(infCtx) })
	s.metrics.informerStarts.Inc()
	s.metrics.networks.Set(float64(len(s.networks)))
	klog.FromContext(ctx).V(2).Info("Watching a network", "network", n)
}

// stopNetworkLocked stops watching network n and returns the keys of the
// remote attachments synced from it, and of those synced that never made it
// into the fabric (no host IP yet): no informer will tell of them again.
// s.mu is held.
func (s *state) stopNetworkLocked(ctx context.Context, n network) []string {
	ni, ok := s.networks[n]
	if !ok {
		return nil
	}
	ni.cancel()
	delete(s.networks, n)
	s.metrics.informerStopped.Inc()
	s.metrics.networks.Set(float64(len(s.networks)))
	var orphans []string
	for addr, p := range s.installed {
		if addr.vni == n.vni && p.kind != local && p.owner != "" && namespaceOf(p.owner) == n.namespace {
			orphans = append(orphans, p.owner)
		}
	}
	for key, addr := range s.keyAddress {
		if addr.vni == n.vni && namespaceOf(key) == n.namespace {
			orphans = append(orphans, key)
		}
	}
	klog.FromContext(ctx).V(2).Info("Stopped watching a network", "network", n)
	return orphans
}

// stopNetworks stops every network informer and waits for their goroutines.
func (s *state) stopNetworks() {
	s.mu.Lock()
	for n, ni := range s.networks {
		ni.cancel()
		delete(s.networks, n)
	}
	s.mu.Unlock()
	s.informers.Wait()
}

// health is what /livez, /readyz and /healthz report, behind a mutex of
// its own that its methods take.
type health struct {
	mu           sync.Mutex
	ready        bool
	lastCheck    time.Time
	lastCheckErr error
}

// setReady records that the first reconcile of the fabric is done.
func (h *health) setReady() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ready = true
}

// checked records the outcome of a check of the fabric.
func (h *health) checked(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastCheck, h.lastCheckErr = time.Now(), err
}

// err returns nil when the first reconcile is done and the last check of
// the fabric, expected every period, succeeded recently.
func (h *health) err(period time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ready {
		return errors.New("the first reconcile of the fabric is not done")
	}
	return h.checkErrLocked(period)
}

// liveErr returns nil unless the first reconcile is done and the last check
// of the fabric since failed or is overdue. Until the first reconcile the
// agent waits for the KOS API and retries what fails, and a restart would
// only start that wait over: a slow API must not fail a liveness probe.
func (h *health) liveErr(period time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ready {
		return nil
	}
	return h.checkErrLocked(period)
}

// checkErrLocked reports a last check of the fabric that failed or is
// overdue. h.mu is held.
func (h *health) checkErrLocked(period time.Duration) error {
	switch {
	case h.lastCheckErr != nil:
		return fmt.Errorf("checking the fabric: %w", h.lastCheckErr)
	case time.Since(h.lastCheck) > 3*period+time.Minute:
		return fmt.Errorf("the fabric was last checked at %s", h.lastCheck.Format(time.RFC3339))
	}
	return nil
}
