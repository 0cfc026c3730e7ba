package etcdbackup

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefragPolicy says when a member is worth defragmenting. Defragmenting
// blocks the member's reads and writes while it rewrites its database, so it
// is done only where enough space would come back: at least MinFreeBytes and
// at least MinFreeRatio of the file.
type DefragPolicy struct {
	MinFreeBytes int64
	MinFreeRatio float64
}

// MemberDefrag is what Defragment did with one member.
type MemberDefrag struct {
	// Name and Endpoint say which member.
	Name     string
	Endpoint string
	// Before is the size of its database file and InUse the part of it
	// that holds data, before; After is the file's size after, when
	// defragmented.
	Before, InUse, After int64
	// Defragmented reports whether it was; Reason says why not.
	Defragmented bool
	Reason       string
}

// String says what happened, on one line.
func (m MemberDefrag) String() string {
	if m.Defragmented {
		return fmt.Sprintf("defragmented %s (%s): %s → %s", m.Name, m.Endpoint, mib(m.Before), mib(m.After))
	}
	return fmt.Sprintf("defrag of %s (%s) skipped: %s", m.Name, m.Endpoint, m.Reason)
}

// Defragment defragments the members of the cluster c reaches that policy
// says are worth it, one at a time, the leader last, and calls report after
// each member. It first asks every member's status and defragments none
// when one does not answer: with a member down, blocking another could cost
// the quorum. It stops at the first member that fails.
func Defragment(ctx context.Context, c *clientv3.Client, policy DefragPolicy, report func(MemberDefrag)) error {
	members, err := c.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("listing the etcd members: %w", err)
	}
	type target struct {
		MemberDefrag
		leader bool
	}
	var targets []target
	var errs []error
	for _, m := range members.Members {
		if m.GetIsLearner() || len(m.GetClientURLs()) == 0 {
			continue
		}
		t := target{MemberDefrag: MemberDefrag{Name: m.GetName(), Endpoint: m.GetClientURLs()[0]}}
		st, err := c.Status(ctx, t.Endpoint)
		if err != nil {
			errs = append(errs, fmt.Errorf("member %s (%s): %w", t.Name, t.Endpoint, err))
			continue
		}
		t.Before, t.InUse = st.DbSize, st.DbSizeInUse
		t.leader = st.Leader == m.GetID()
		targets = append(targets, t)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("defragmenting no member, as not every member answers: %w", err)
	}
	// Followers first: the leader's pause then costs one election at most.
	slices.SortStableFunc(targets, func(a, b target) int {
		switch {
		case a.leader == b.leader:
			return 0
		case b.leader:
			return -1
		}
		return 1
	})
	for _, t := range targets {
		m := t.MemberDefrag
		free := m.Before - m.InUse
		ratio := 0.0
		if m.Before > 0 {
			ratio = float64(free) / float64(m.Before)
		}
		if free < policy.MinFreeBytes || ratio < policy.MinFreeRatio {
			m.Reason = fmt.Sprintf("%s of %s free (%.0f%%), under the policy's %s and %.0f%%",
				mib(free), mib(m.Before), 100*ratio, mib(policy.MinFreeBytes), 100*policy.MinFreeRatio)
			report(m)
			continue
		}
		if _, err := c.Defragment(ctx, m.Endpoint); err != nil {
			return fmt.Errorf("defragmenting member %s (%s): %w", m.Name, m.Endpoint, err)
		}
		st, err := c.Status(ctx, m.Endpoint)
		if err != nil {
			return fmt.Errorf("member %s (%s) after defragmenting: %w", m.Name, m.Endpoint, err)
		}
		m.After, m.Defragmented = st.DbSize, true
		report(m)
	}
	return nil
}

// mib prints a size in MiB, or in KiB below one MiB.
func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// DisarmNoSpace clears the NOSPACE alarms of the cluster c reaches, which
// etcd raises when a member's database reaches its quota and which keep the
// cluster refusing writes until cleared, and returns the IDs of the members
// whose alarm it cleared. A member still over its quota raises it again at
// its next write.
func DisarmNoSpace(ctx context.Context, c *clientv3.Client) ([]uint64, error) {
	alarms, err := c.AlarmList(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the etcd alarms: %w", err)
	}
	var cleared []uint64
	for _, a := range alarms.Alarms {
		if a.GetAlarm() != etcdserverpb.AlarmType_NOSPACE {
			continue
		}
		m := clientv3.AlarmMember{MemberID: a.GetMemberID(), Alarm: a.GetAlarm()}
		if _, err := c.AlarmDisarm(ctx, &m); err != nil {
			return cleared, fmt.Errorf("disarming the NOSPACE alarm of member %x: %w", a.GetMemberID(), err)
		}
		cleared = append(cleared, a.GetMemberID())
	}
	return cleared, nil
}
