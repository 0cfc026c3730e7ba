package channels

import (
	"fmt"
	"sync"
)

// EventType says what a run just did.
type EventType string

// The events a run reports, in the order they can happen.
const (
	// EventWaiting: another run holds the lease; this one waits for it.
	EventWaiting EventType = "Waiting"
	// EventLocked: this run holds the lease and starts changing the cluster.
	EventLocked EventType = "Locked"
	// EventApplied: an addon was applied, pruned and recorded.
	EventApplied EventType = "Applied"
	// EventProgress: an addon is applied and waits for its objects to be
	// ready; repeated while it waits.
	EventProgress EventType = "Progress"
	// EventPruned: an object the addon no longer has was deleted.
	EventPruned EventType = "Pruned"
	// EventNote: something was left out on purpose, such as a kind to prune
	// that the server no longer serves.
	EventNote EventType = "Note"
	// EventFailed: an addon failed; its record is unchanged.
	EventFailed EventType = "Failed"
	// EventUnlocked: this run is done and has released the lease.
	EventUnlocked EventType = "Unlocked"
)

// Event is one step of a run, reported as it happens.
type Event struct {
	Type EventType
	// Addon names the addon the event is about; empty for lease events.
	Addon string
	// Message says what happened, in words fit for a terminal.
	Message string
}

// String formats the event as one line of output.
func (e Event) String() string {
	if e.Addon == "" {
		return e.Message
	}
	return fmt.Sprintf("%s: %s", e.Addon, e.Message)
}

// reporter calls an optional event handler. Handlers may be called from
// several goroutines, one call at a time.
type reporter struct {
	mu     sync.Mutex
	handle func(Event)
}

func newReporter(handle func(Event)) *reporter {
	return &reporter{handle: handle}
}

func (r *reporter) report(t EventType, addon, format string, args ...any) {
	if r == nil || r.handle == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handle(Event{Type: t, Addon: addon, Message: fmt.Sprintf(format, args...)})
}
