package cni

import (
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPassedConnReadAfterReset checks that a read that fails in recvmsg
// (here ECONNRESET: the peer closed with data it never read) reports no
// negative count: io.Reader allows none, and net/http, which reads the
// agent's CNI connections, panics on one.
func TestPassedConnReadAfterReset(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*net.UnixConn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
	}
	pc := &passedConn{UnixConn: conns[0]}
	defer pc.Close()
	if _, err := pc.Write([]byte("never read")); err != nil {
		t.Fatal(err)
	}
	conns[1].Close()
	n, err := pc.Read(make([]byte, 16))
	if n < 0 || err == nil {
		t.Errorf("Read after the peer reset = %d, %v; want 0 or more and an error", n, err)
	}
}
