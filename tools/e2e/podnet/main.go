// Command podnet is the workload of the e2e tests' pods on KOS networks:
// it serves a TCP sink that answers with the length and SHA-256 of what it
// received and a TCP echo, sends a stream of pseudo-random bytes to such a
// sink and checks the answer, holds long-lived connections to echoes and
// reports how they fare, and reports an interface's MTU and addresses. The
// tests run it with kubectl exec (and ping, which the image also holds)
// inside pods.
//
//	podnet serve [PORT]        the sink on PORT (7777) and the echo on PORT+1 (the pod's main process),
//	                           and a UDP echo on both
//	podnet udp-echo HOST:PORT  send a datagram to a UDP echo and wait for it to come back (1 s,
//	                           three tries); exit 1 saying "no answer" when it never does
//	podnet send HOST:PORT N    send N bytes, print a JSON report, exit 1 on a mismatch
//	podnet chat [-conns N] [-every D] [-for D] HOST:PORT...
//	                           hold N connections (2) to each echo, send a line on each every D
//	                           (100ms), print a JSON report of them all every second, for D (10m)
//	                           or until printing fails
//	podnet flip open|closed tcp|udp HOST:PORT
//	                           print "ready", then try HOST:PORT every 10 ms until it turns open
//	                           (or closed) and print when, in Unix nanoseconds: open is the
//	                           first connection made or echo answered, closed the first attempt
//	                           that got no answer in 1 s, when none begun in the 2.5 s after it
//	                           got one either (when it began)
//	podnet addr IFNAME         print "MTU ADDR/LEN..." of the interface
//	podnet udp-sink PORT SECS  count the UDP datagrams to PORT for SECS seconds, print the count
//	podnet udp-send [-src IP] HOST:PORT N
//	                           send N datagrams; with -src, from a source address the pod
//	                           does not have (a raw socket: the pod needs CAP_NET_RAW)
//	podnet frame-send IFNAME SRCMAC DSTMAC SRCIP HOST:PORT N
//	                           send N datagrams as Ethernet frames of the given source MAC
//	                           address out of IFNAME (a packet socket: CAP_NET_RAW)
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kos-sdn/kos/tools/e2e/frames"
	"github.com/kos-sdn/kos/tools/e2e/podnet/report"
)

const defaultPort = "7777"

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "serve":
		port := defaultPort
		if len(os.Args) > 2 {
			port = os.Args[2]
		}
		err = serve(port)
	case "send":
		if len(os.Args) != 4 {
			usage()
		}
		n, perr := strconv.ParseInt(os.Args[3], 10, 64)
		if perr != nil || n < 0 {
			fmt.Fprintf(os.Stderr, "podnet send: %q is no byte count\n", os.Args[3])
			os.Exit(2)
		}
		err = send(os.Args[2], n)
	case "chat":
		err = chat(os.Args[2:])
	case "udp-sink":
		if len(os.Args) != 4 {
			usage()
		}
		err = udpSink(os.Args[2], os.Args[3])
	case "udp-send":
		err = udpSend(os.Args[2:])
	case "udp-echo":
		if len(os.Args) != 3 {
			usage()
		}
		err = udpEcho(os.Args[2])
	case "frame-send":
		if len(os.Args) != 8 {
			usage()
		}
		err = frameSend(os.Args[2:])
	case "flip":
		base := 0
		switch len(os.Args) {
		case 5:
		case 6:
			if base, err = strconv.Atoi(os.Args[5]); err != nil || base < 1024 || base > 65535-flipPorts {
				usage()
			}
		default:
			usage()
		}
		err = flip(os.Args[2], os.Args[3], os.Args[4], base)
	case "addr":
		if len(os.Args) != 3 {
			usage()
		}
		err = addr(os.Args[2])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "podnet %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: podnet serve [PORT] | send HOST:PORT BYTES | chat [-conns N] [-every D] [-for D] HOST:PORT... | addr IFNAME | udp-sink PORT SECS | udp-echo HOST:PORT | flip open|closed tcp|udp HOST:PORT [UDP-PORT-BASE] | udp-send [-src IP] HOST:PORT N")
	os.Exit(2)
}

// serve answers every connection to port with "LENGTH SHA256\n" of what
// it sent until it closed its side, and echoes what connections to port+1
// send.
func serve(port string) error {
	p, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("port %q: %w", port, err)
	}
	l, err := net.Listen("tcp", ":"+port)
	if err != nil {
		return err
	}
	echo, err := net.Listen("tcp", ":"+strconv.Itoa(p+1))
	if err != nil {
		return err
	}
	for _, port := range []int{p, p + 1} {
		c, err := net.ListenPacket("udp4", ":"+strconv.Itoa(port))
		if err != nil {
			return err
		}
		go echoUDP(c)
	}
	fmt.Printf("podnet: serving on %s, echoing on %s, and on UDP %d and %d\n", l.Addr(), echo.Addr(), p, p+1)
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				fmt.Fprintf(os.Stderr, "podnet: echo: %v\n", err)
				os.Exit(1)
			}
			go func() {
				defer c.Close()
				if _, err := io.Copy(c, c); err != nil {
					fmt.Fprintf(os.Stderr, "podnet: echoing to %s: %v\n", c.RemoteAddr(), err)
				}
			}()
		}
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			h := sha256.New()
			n, err := io.Copy(h, c)
			if err != nil {
				fmt.Fprintf(os.Stderr, "podnet: reading from %s: %v\n", c.RemoteAddr(), err)
				return
			}
			fmt.Fprintf(c, "%d %s\n", n, hex.EncodeToString(h.Sum(nil)))
		}()
	}
}

// echoUDP sends every datagram back to where it came from, until reading
// fails (the process ends with it).
func echoUDP(c net.PacketConn) {
	buf := make([]byte, 65536)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			fmt.Fprintf(os.Stderr, "podnet: UDP echo: %v\n", err)
			os.Exit(1)
		}
		if _, err := c.WriteTo(buf[:n], from); err != nil {
			fmt.Fprintf(os.Stderr, "podnet: UDP echo to %s: %v\n", from, err)
		}
	}
}

// udpEcho sends a datagram to the UDP echo at addr and waits a second for
// it to come back, three times; "no answer" says none came back (a policy
// test counts that as dropped).
func udpEcho(addr string) error {
	c, err := net.Dial("udp4", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	payload := []byte("podnet " + strconv.Itoa(os.Getpid()))
	buf := make([]byte, 1500)
	for range 3 {
		if _, err := c.Write(payload); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		n, err := c.Read(buf)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			continue
		case err != nil:
			return err
		case string(buf[:n]) != string(payload):
			return fmt.Errorf("the echo answered %q to %q", buf[:n], payload)
		}
		return nil
	}
	return fmt.Errorf("no answer from %s in three tries", addr)
}

// send sends n pseudo-random bytes to the sink at addr and checks its
// answer.
func send(addr string, n int64) error {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	// Two minutes for the whole transfer: a stalled one fails.
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	src := rand.NewChaCha8([32]byte{'k', 'o', 's'})
	h := sha256.New()
	began := time.Now()
	if _, err := io.Copy(c, io.TeeReader(io.LimitReader(src, n), h)); err != nil {
		return fmt.Errorf("sending: %w", err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading the sink's answer: %w", err)
	}
	took := time.Since(began)
	r := report.Transfer{Bytes: n, Sent: hex.EncodeToString(h.Sum(nil)), Seconds: took.Seconds(), MBps: float64(n) / took.Seconds() / 1e6}
	got := strings.Fields(line)
	if len(got) == 2 {
		r.Received = got[1]
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return err
	}
	if len(got) != 2 || got[0] != strconv.FormatInt(n, 10) || got[1] != r.Sent {
		return fmt.Errorf("the sink received %q, want %d %s", strings.TrimSpace(line), n, r.Sent)
	}
	return nil
}

// chatConn is one of chat's connections; mu guards what follows it.
type chatConn struct {
	c  net.Conn
	mu sync.Mutex
	// sent and echoed count lines; since is when the oldest line not yet
	// echoed was sent, or of the last echo; longest is the longest stall
	// seen; err why the connection ended.
	sent, echoed int64
	since        time.Time
	longest      time.Duration
	err          error
}

// chat holds connections to echo servers, sends a numbered line on each at
// a steady rate, checks that each comes back in order, and prints a
// report.Chat every second. A connection that fails stays closed: chat
// counts connections that survive, it does not keep traffic up.
func chat(args []string) error {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	conns := fs.Int("conns", 2, "connections to each address")
	every := fs.Duration("every", 100*time.Millisecond, "how often each connection sends a line")
	lasting := fs.Duration("for", 10*time.Minute, "how long to run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		usage()
	}
	var all []*chatConn
	for _, addr := range fs.Args() {
		for range *conns {
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				return fmt.Errorf("connecting to %s: %w", addr, err)
			}
			all = append(all, &chatConn{c: c, since: time.Now()})
		}
	}
	for _, cc := range all {
		go cc.send(*every)
		go cc.receive()
	}
	end := time.After(*lasting)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-end:
			return printReport(all)
		case <-tick.C:
			// A report that cannot be printed means the one reading
			// them (kubectl exec) went: so does chat.
			if err := printReport(all); err != nil {
				return err
			}
		}
	}
}

func printReport(all []*chatConn) error {
	r := report.Chat{Opened: len(all)}
	now := time.Now()
	for _, cc := range all {
		cc.mu.Lock()
		r.Sent += cc.sent
		r.Echoed += cc.echoed
		stall := cc.longest
		if cc.err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("%s -> %s: %v", cc.c.LocalAddr(), cc.c.RemoteAddr(), cc.err))
		} else {
			r.Alive++
			if cc.echoed < cc.sent {
				now := now.Sub(cc.since)
				r.StalledNowMS = max(r.StalledNowMS, now.Milliseconds())
				stall = max(stall, now)
			}
		}
		r.LongestStallMS = max(r.LongestStallMS, stall.Milliseconds())
		cc.mu.Unlock()
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// fail ends the connection for err, unless it ended already.
func (cc *chatConn) fail(err error) {
	cc.mu.Lock()
	if cc.err == nil {
		cc.err = err
	}
	cc.mu.Unlock()
	cc.c.Close()
}

func (cc *chatConn) send(every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for range tick.C {
		cc.mu.Lock()
		if cc.err != nil {
			cc.mu.Unlock()
			return
		}
		if cc.echoed == cc.sent {
			cc.since = time.Now()
		}
		cc.sent++
		line := fmt.Sprintf("%d\n", cc.sent)
		cc.mu.Unlock()
		// The kernel takes a small line at once while the path is down
		// (it retransmits): a write fails only once the connection did.
		if _, err := io.WriteString(cc.c, line); err != nil {
			cc.fail(fmt.Errorf("sending: %w", err))
			return
		}
	}
}

func (cc *chatConn) receive() {
	r := bufio.NewReader(cc.c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			cc.fail(fmt.Errorf("receiving: %w", err))
			return
		}
		n, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
		now := time.Now()
		cc.mu.Lock()
		if err != nil || n != cc.echoed+1 {
			cc.mu.Unlock()
			cc.fail(fmt.Errorf("echoed %q, want line %d", strings.TrimSpace(line), cc.echoed+1))
			return
		}
		cc.echoed = n
		cc.longest = max(cc.longest, now.Sub(cc.since))
		cc.since = now
		cc.mu.Unlock()
	}
}

// addr prints the interface's MTU and addresses.
func addr(name string) error {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return err
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return err
	}
	fields := []string{strconv.Itoa(ifc.MTU)}
	for _, a := range addrs {
		fields = append(fields, a.String())
	}
	fmt.Println(strings.Join(fields, " "))
	return nil
}

// udpSink counts the datagrams that reach port for secs seconds.
func udpSink(port, secs string) error {
	d, err := time.ParseDuration(secs + "s")
	if err != nil {
		return err
	}
	c, err := net.ListenPacket("udp4", ":"+port)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(d))
	n := 0
	buf := make([]byte, 65536)
	for {
		if _, _, err := c.ReadFrom(buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			return err
		}
		n++
	}
	fmt.Println(n)
	return nil
}

// udpSend sends n datagrams to addr, from the given source address when
// -src names one (an IPv4 header of its own on a raw socket).
func udpSend(args []string) error {
	var src netip.Addr
	if len(args) == 4 && args[0] == "-src" {
		a, err := netip.ParseAddr(args[1])
		if err != nil {
			return err
		}
		src, args = a, args[2:]
	}
	if len(args) != 2 {
		usage()
	}
	dst, err := netip.ParseAddrPort(args[0])
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	payload := []byte("podnet")
	if !src.IsValid() {
		c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(dst))
		if err != nil {
			return err
		}
		defer c.Close()
		for range n {
			if _, err := c.Write(payload); err != nil {
				return err
			}
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_RAW)
	if err != nil {
		return fmt.Errorf("a raw socket (CAP_NET_RAW): %w", err)
	}
	defer syscall.Close(fd)
	packet := frames.IPv4UDP(src, dst.Addr(), 40000, dst.Port(), payload)
	to := &syscall.SockaddrInet4{Addr: dst.Addr().As4()}
	for range n {
		if err := syscall.Sendto(fd, packet, 0, to); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// frameSend sends n UDP datagrams as whole Ethernet frames with the given
// addresses out of an interface.
func frameSend(args []string) error {
	ifc, err := net.InterfaceByName(args[0])
	if err != nil {
		return err
	}
	srcMAC, err := net.ParseMAC(args[1])
	if err != nil {
		return err
	}
	dstMAC, err := net.ParseMAC(args[2])
	if err != nil {
		return err
	}
	srcIP, err := netip.ParseAddr(args[3])
	if err != nil {
		return err
	}
	dst, err := netip.ParseAddrPort(args[4])
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(args[5])
	if err != nil {
		return err
	}
	fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, 0)
	if err != nil {
		return fmt.Errorf("a packet socket (CAP_NET_RAW): %w", err)
	}
	defer syscall.Close(fd)
	frame := frames.Ethernet(dstMAC, srcMAC, frames.IPv4UDP(srcIP, dst.Addr(), 40000, dst.Port(), []byte("podnet")))
	to := &syscall.SockaddrLinklayer{Ifindex: ifc.Index, Halen: 6}
	copy(to.Addr[:], dstMAC)
	for range n {
		if err := syscall.Sendto(fd, frame, 0, to); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}
