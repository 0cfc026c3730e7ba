package cniserver

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// peerListener accepts only connections from processes of user uid, as the
// kernel names them (SO_PEERCRED): the socket's and its folder's modes keep
// others out already, and this holds should either be changed on the node.
// It closes any other connection, and says so.
type peerListener struct {
	net.Listener
	uid    uint32
	logger klog.Logger
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		cred, err := peerCred(c)
		if err == nil && cred.Uid == l.uid {
			return c, nil
		}
		if err == nil {
			err = fmt.Errorf("process %d of user %d is not user %d's", cred.Pid, cred.Uid, l.uid)
		}
		l.logger.Error(err, "Refused a connection to the CNI socket")
		c.Close()
	}
}

// peerCred returns the credentials of the process at the other end of a
// Unix socket connection.
func peerCred(c net.Conn) (*unix.Ucred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("a %T is no Unix socket connection", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("reading the peer's credentials: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, fmt.Errorf("reading the peer's credentials: %w", err)
	}
	if credErr != nil {
		return nil, fmt.Errorf("reading the peer's credentials: %w", credErr)
	}
	if cred == nil {
		return nil, errors.New("reading the peer's credentials: none")
	}
	return cred, nil
}
