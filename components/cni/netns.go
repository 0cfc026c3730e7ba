package cni

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// The sandbox's network namespace travels as an open file, not as a path.
// kos-cni runs in the node's mount namespace, where CNI_NETNS names the
// namespace (/var/run/netns/cni-..., a runtime's state folder, or
// /proc/PID/ns/net); kos-agent runs in a container, where that path may
// mean nothing. So kos-cni opens the path and passes the descriptor with the
// first bytes of its request (SCM_RIGHTS on the Unix socket), and the agent
// enters the namespace through that descriptor: it needs no mount of the
// runtime's folders and no view of the node's processes, whatever runtime
// made the namespace.

// openNetns opens the network namespace at path for passing to the agent;
// a nil file and no error when path is empty.
func openNetns(path string) (*os.File, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// fdConn is a client connection that sends a descriptor with its first
// write.
type fdConn struct {
	*net.UnixConn
	file *os.File
	sent bool
}

func (c *fdConn) Write(b []byte) (int, error) {
	if c.sent || c.file == nil || len(b) == 0 {
		return c.UnixConn.Write(b)
	}
	n, _, err := c.UnixConn.WriteMsgUnix(b, unix.UnixRights(int(c.file.Fd())), nil)
	if err != nil {
		return n, err
	}
	c.sent = true
	if n < len(b) {
		m, err := c.UnixConn.Write(b[n:])
		return n + m, err
	}
	return n, nil
}

// dialPassing dials the agent's socket and returns a connection that sends
// netns, if not nil, with its first write.
func dialPassing(ctx context.Context, socket string, netns *os.File) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("%s is no Unix socket", socket)
	}
	return &fdConn{UnixConn: uc, file: netns}, nil
}

// NetnsListener wraps the agent's listener on the CNI socket: its
// connections keep the descriptor a client passed, which NetnsFile gives to
// the request's handler once the server's ConnContext is NetnsConnContext.
func NetnsListener(l net.Listener) net.Listener { return &netnsListener{Listener: l} }

type netnsListener struct{ net.Listener }

func (l *netnsListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return conn, nil
	}
	return &passedConn{UnixConn: uc}, nil
}

// passedConn is a server connection that keeps the descriptors its client
// passes: the first as the sandbox's namespace, any other closed at once.
type passedConn struct {
	*net.UnixConn
	mu   sync.Mutex
	file *os.File
}

func (c *passedConn) Read(b []byte) (int, error) {
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := c.UnixConn.ReadMsgUnix(b, oob)
	if oobn > 0 {
		c.keep(oob[:oobn])
	}
	// ReadMsgUnix answers -1 with an error (a closed connection, when the
	// agent stops); io.Reader allows no negative count, and net/http
	// panics on one.
	if n < 0 {
		n = 0
	}
	return n, err
}

// keep takes the descriptors of a control message.
func (c *passedConn) keep(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		c.mu.Lock()
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			if c.file == nil {
				c.file = os.NewFile(uintptr(fd), "netns")
			} else {
				unix.Close(fd)
			}
		}
		c.mu.Unlock()
	}
}

// netns returns the descriptor the client passed, or nil.
func (c *passedConn) netns() *os.File {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.file
}

func (c *passedConn) Close() error {
	c.mu.Lock()
	if c.file != nil {
		c.file.Close()
		c.file = nil
	}
	c.mu.Unlock()
	return c.UnixConn.Close()
}

type connKey struct{}

// NetnsConnContext is an http.Server's ConnContext that lets NetnsFile find
// the connection of a request.
func NetnsConnContext(ctx context.Context, c net.Conn) context.Context {
	if pc, ok := c.(*passedConn); ok {
		return context.WithValue(ctx, connKey{}, pc)
	}
	return ctx
}

// NetnsFile returns the network namespace kos-cni passed with the request
// of ctx, or nil when it passed none (an older plugin, or a DEL whose
// namespace is gone). The file stays open until the connection closes.
func NetnsFile(ctx context.Context) *os.File {
	pc, ok := ctx.Value(connKey{}).(*passedConn)
	if !ok {
		return nil
	}
	return pc.netns()
}

// NetnsPath returns the path through which the agent opens the network
// namespace kos-cni passed with the request of ctx (/proc/self/fd/N), or
// fallback, the path the request named, when it passed none.
func NetnsPath(ctx context.Context, fallback string) string {
	if f := NetnsFile(ctx); f != nil {
		return fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	}
	return fallback
}
