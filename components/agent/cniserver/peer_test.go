package cniserver

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2"
)

// TestListenUnix checks that the CNI socket and its folder are root's
// alone, also when the folder existed with kubelet's 0755.
func TestListenUnix(t *testing.T) {
	for _, existing := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "kos")
		if existing {
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		path := filepath.Join(dir, "cni.sock")
		l, err := listenUnix(path)
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600} {
			fi, err := os.Stat(p)
			if err != nil && p == path && errors.Is(err, os.ErrNotExist) {
				continue // closing the listener removed the socket
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got != want {
				t.Errorf("folder existed %t: %s has mode %o, want %o", existing, p, got, want)
			}
		}
	}
}

// TestPeerListener connects to a socket whose listener accepts this
// process's user, then one whose listener accepts another user only: the
// first connection is served, the second closed unanswered.
func TestPeerListener(t *testing.T) {
	self := uint32(os.Getuid())
	for _, tt := range []struct {
		name     string
		uid      uint32
		accepted bool
	}{
		{"the allowed user", self, true},
		{"another user", self + 1, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.sock")
			inner, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			l := &peerListener{Listener: inner, uid: tt.uid, logger: klog.Background()}
			defer l.Close()
			accepted := make(chan struct{})
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				close(accepted)
				_, _ = c.Write([]byte("hi"))
				c.Close()
			}()
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := io.ReadAll(c)
			if tt.accepted && (err != nil || string(got) != "hi") {
				t.Errorf("read %q, %v; want the server's hi", got, err)
			}
			if !tt.accepted {
				if err != nil || len(got) != 0 {
					t.Errorf("read %q, %v; want the connection closed at once", got, err)
				}
				select {
				case <-accepted:
					t.Error("the listener passed on a connection of another user")
				default:
				}
			}
		})
	}
}
