package probe

// This file is what a probe checks: a ping, a ping of a whole MTU with
// Don't Fragment set, and a TCP connection, each from inside the probe's
// network namespace.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kos-sdn/kos/components/agent/api"
)

// Limits of a check request.
const (
	// MaxTimeoutSeconds bounds each of a check's three parts, which run
	// one after another within the debug server's 20 s per request.
	MaxTimeoutSeconds = 5
	// minMTU is IPv4's smallest; maxMTU the largest an interface takes.
	minMTU = 68
	maxMTU = 65535
	// ipICMPHeaders is the size of an echo request's IPv4 and ICMP
	// headers.
	ipICMPHeaders = 20 + 8
	// pingInterval is how often a ping asks again while no reply came:
	// the first request may be lost while the probe resolves the peer's
	// MAC address.
	pingInterval = 300 * time.Millisecond
)

// ValidateStart returns every problem with a probe request at once.
func ValidateStart(req api.ProbeRequest) error {
	return errors.Join(validateName(req.Namespace, req.Name)...)
}

// ValidateCheck returns every problem with a check request at once.
func ValidateCheck(req api.ProbeCheckRequest) error {
	errs := validateName(req.Namespace, req.Name)
	if ip, err := netip.ParseAddr(req.To); err != nil || !ip.Is4() || ip.Zone() != "" {
		errs = append(errs, fmt.Errorf("destination %q: want an IPv4 address", req.To))
	}
	if req.MTU < minMTU || req.MTU > maxMTU {
		errs = append(errs, fmt.Errorf("mtu %d: want an MTU in [%d,%d]", req.MTU, minMTU, maxMTU))
	}
	if req.TimeoutSeconds < 1 || req.TimeoutSeconds > MaxTimeoutSeconds {
		errs = append(errs, fmt.Errorf("timeoutSeconds %d: want [1,%d]", req.TimeoutSeconds, MaxTimeoutSeconds))
	}
	return errors.Join(errs...)
}

func validateName(namespace, name string) []error {
	var errs []error
	for _, msg := range validation.IsDNS1123Label(namespace) {
		errs = append(errs, fmt.Errorf("namespace %q: %s", namespace, msg))
	}
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		errs = append(errs, fmt.Errorf("name %q: %s", name, msg))
	}
	return errs
}

// check runs the three checks of req, one after another.
func (p *probe) check(ctx context.Context, req api.ProbeCheckRequest) api.ProbeCheckResult {
	to := netip.MustParseAddr(req.To) // ValidateCheck parsed it
	timeout := time.Duration(req.TimeoutSeconds) * time.Second
	return api.ProbeCheckResult{
		Ping:         p.ping(ctx, to, 56, false, timeout),
		FullSizePing: p.ping(ctx, to, req.MTU-ipICMPHeaders, true, timeout),
		TCP:          p.dial(ctx, to, timeout),
	}
}

// ping sends echo requests of size bytes of data to `to` until one is
// answered or timeout passes; with dontFragment, the IPv4 packets have the
// Don't Fragment bit (IP_PMTUDISC_DO), so that a path that cannot carry
// them whole loses them. It needs CAP_NET_RAW.
func (p *probe) ping(ctx context.Context, to netip.Addr, size int, dontFragment bool, timeout time.Duration) api.ProbeOutcome {
	var conn *net.IPConn
	err := inNetns(p.ns, func() error {
		c, err := net.ListenPacket("ip4:icmp", "0.0.0.0")
		if err != nil {
			return err
		}
		conn = c.(*net.IPConn)
		return nil
	})
	if errors.Is(err, syscall.EPERM) {
		return fail("opening an ICMP socket: %v (the agent needs CAP_NET_RAW)", err)
	}
	if err != nil {
		return fail("opening an ICMP socket: %v", err)
	}
	defer conn.Close()
	if dontFragment {
		if err := setDontFragment(conn); err != nil {
			return fail("setting Don't Fragment: %v", err)
		}
	}
	id := rand.IntN(1 << 16)
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	what := "ping"
	if dontFragment {
		what = fmt.Sprintf("%d-byte ping with Don't Fragment", size+ipICMPHeaders)
	}
	start := time.Now()
	buf := make([]byte, 64<<10)
	for seq := 1; time.Now().Before(deadline); seq++ {
		msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: seq, Data: make([]byte, size)}}
		b, err := msg.Marshal(nil)
		if err != nil {
			return fail("making an echo request: %v", err)
		}
		if _, err := conn.WriteTo(b, &net.IPAddr{IP: to.AsSlice()}); err != nil {
			return fail("%s to %s: %v", what, to, err)
		}
		wait := time.Now().Add(pingInterval)
		if wait.After(deadline) {
			wait = deadline
		}
		if err := conn.SetReadDeadline(wait); err != nil {
			return fail("%s to %s: %v", what, to, err)
		}
		// The raw socket sees every ICMP message of the namespace: the
		// other probes' requests and replies to other pings too.
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				break // the wait is over: ask again
			}
			if ip, ok := from.(*net.IPAddr); !ok || !ip.IP.Equal(to.AsSlice()) {
				continue
			}
			reply, err := icmp.ParseMessage(1, buf[:n])
			if err != nil || reply.Type != ipv4.ICMPTypeEchoReply {
				continue
			}
			if echo, ok := reply.Body.(*icmp.Echo); ok && echo.ID == id && len(echo.Data) == size {
				return api.ProbeOutcome{OK: true, Detail: fmt.Sprintf("%s: reply in %s", what, time.Since(start).Round(time.Microsecond))}
			}
		}
	}
	return fail("%s to %s: no reply within %s", what, to, timeout)
}

// setDontFragment sets IP_PMTUDISC_DO on conn.
func setDontFragment(conn syscall.Conn) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var sockErr error
	if err := raw.Control(func(fd uintptr) {
		sockErr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	}); err != nil {
		return err
	}
	return sockErr
}

// dial connects to the probe port of `to` within timeout.
func (p *probe) dial(ctx context.Context, to netip.Addr, timeout time.Duration) api.ProbeOutcome {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr := net.JoinHostPort(to.String(), strconv.Itoa(api.ProbePort))
	start := time.Now()
	var conn net.Conn
	// The socket is made, and stays, in the probe's namespace.
	err := inNetns(p.ns, func() (err error) {
		conn, err = (&net.Dialer{}).DialContext(ctx, "tcp4", addr)
		return err
	})
	if err != nil {
		return fail("TCP to %s: %v", addr, err)
	}
	conn.Close()
	return api.ProbeOutcome{OK: true, Detail: fmt.Sprintf("TCP to %s: connected in %s", addr, time.Since(start).Round(time.Microsecond))}
}

func fail(format string, args ...any) api.ProbeOutcome {
	return api.ProbeOutcome{Detail: fmt.Sprintf(format, args...)}
}
