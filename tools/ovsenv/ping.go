package ovsenv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// Ping sends count ICMP echo requests from inside the namespace to dst, one
// at a time, each waiting up to timeout for its reply, and returns how many
// replies came back. It needs no ping program: the raw socket is opened
// inside the namespace. An error means the probe itself failed, not that
// dst was unreachable.
func (n *Netns) Ping(ctx context.Context, dst netip.Addr, count int, timeout time.Duration) (int, error) {
	if !dst.Is4() {
		return 0, fmt.Errorf("ping %v: only IPv4 is supported", dst)
	}
	var conn *icmp.PacketConn
	if err := n.Do(func() error {
		var err error
		conn, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		return err
	}); err != nil {
		return 0, fmt.Errorf("opening an ICMP socket in %s: %w", n.Name, err)
	}
	defer conn.Close()

	id := rand.IntN(1 << 16)
	to := &net.IPAddr{IP: dst.AsSlice()}
	received := 0
	for seq := 1; seq <= count; seq++ {
		if err := ctx.Err(); err != nil {
			return received, err
		}
		req := icmp.Message{
			Type: ipv4.ICMPTypeEcho,
			Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("ovsenv ping")},
		}
		b, err := req.Marshal(nil)
		if err != nil {
			return received, fmt.Errorf("building an echo request: %w", err)
		}
		if _, err := conn.WriteTo(b, to); err != nil {
			return received, fmt.Errorf("sending an echo request to %v: %w", dst, err)
		}
		ok, err := awaitReply(conn, dst, id, seq, time.Now().Add(timeout))
		if err != nil {
			return received, err
		}
		if ok {
			received++
		}
	}
	return received, nil
}

// awaitReply reads until the echo reply with id and seq arrives from dst or
// the deadline passes. The raw socket sees every ICMP message of the
// namespace, so others are skipped.
func awaitReply(conn *icmp.PacketConn, dst netip.Addr, id, seq int, deadline time.Time) (bool, error) {
	if err := conn.SetReadDeadline(deadline); err != nil {
		return false, fmt.Errorf("setting a read deadline: %w", err)
	}
	buf := make([]byte, 1500)
	for {
		nr, from, err := conn.ReadFrom(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("reading an echo reply: %w", err)
		}
		msg, err := icmp.ParseMessage(1, buf[:nr])
		if err != nil || msg.Type != ipv4.ICMPTypeEchoReply {
			continue
		}
		echo, ok := msg.Body.(*icmp.Echo)
		if !ok || echo.ID != id || echo.Seq != seq {
			continue
		}
		if ip, ok := from.(*net.IPAddr); ok {
			if addr, ok := netip.AddrFromSlice(ip.IP); ok && addr.Unmap() == dst {
				return true, nil
			}
		}
	}
}
