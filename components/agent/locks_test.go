package agent

import (
	"net/netip"
	"testing"
	"time"
)

// TestAddressLocks checks that one address's lock excludes its other
// takers but not another address's, and that a lock no one holds or
// waits for is forgotten.
func TestAddressLocks(t *testing.T) {
	var l addressLocks
	a := address{vni: 1, ip: netip.MustParseAddr("10.0.0.1")}
	b := address{vni: 1, ip: netip.MustParseAddr("10.0.0.2")}
	unlockA := l.lock(a)

	took := make(chan func())
	go func() { took <- l.lock(b) }()
	select {
	case unlockB := <-took:
		unlockB()
	case <-time.After(10 * time.Second):
		t.Fatal("the lock of another address waited for a held one")
	}

	go func() { took <- l.lock(a) }()
	select {
	case <-took:
		t.Fatal("an address's lock was taken while held")
	case <-time.After(50 * time.Millisecond):
	}
	unlockA()
	select {
	case unlockA2 := <-took:
		unlockA2()
	case <-time.After(10 * time.Second):
		t.Fatal("an address's lock was not taken once released")
	}
	if n := len(l.locks); n != 0 {
		t.Errorf("%d locks remembered after every one was released, want 0", n)
	}
}
