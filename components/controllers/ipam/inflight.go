package ipam

// This file holds the records of the addresses this controller locked
// and wrote, which stand in for its caches until they catch up.

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// inflight records an address this controller locked for an attachment, so
// that it neither takes a second one nor writes the first again while its
// caches catch up with its own writes.
type inflight struct {
	// attUID and subnetUID identify the attachment and the subnet the lock
	// was taken for; the record is void for any other.
	attUID, subnetUID types.UID
	// lockName and lockUID identify the lock created.
	lockName string
	lockUID  types.UID
	// seenRV is the attachment's resourceVersion the decision was based on;
	// writtenRV the one the write of the address produced, "" until it
	// succeeded.
	seenRV, writtenRV string
}

// inflightRecords holds the records by attachment key; it is safe for
// concurrent use.
type inflightRecords struct {
	mu      sync.Mutex
	records map[string]*inflight
}

func newInflightRecords() *inflightRecords {
	return &inflightRecords{records: map[string]*inflight{}}
}

// get returns a copy of the record of key, or nil.
func (r *inflightRecords) get(key string) *inflight {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec, ok := r.records[key]; ok {
		cp := *rec
		return &cp
	}
	return nil
}

func (r *inflightRecords) put(key string, rec *inflight) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records[key] = rec
}

// written notes that the address of key's record was written, producing
// resourceVersion rv.
func (r *inflightRecords) written(key, rv string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec, ok := r.records[key]; ok {
		rec.writtenRV = rv
	}
}

func (r *inflightRecords) forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.records, key)
}
