package testenv

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/spawner"
)

func TestEnsurePKI(t *testing.T) {
	dir := t.TempDir()
	if wrote, err := ensurePKI(dir); err != nil || !wrote {
		t.Fatalf("ensurePKI in an empty folder = %v, %v; want true, nil", wrote, err)
	}
	file := func(name string) string { return filepath.Join(dir, name) }

	tests := []struct {
		name      string
		cert, key string
		ca        string
		usage     x509.ExtKeyUsage
		host      string
		wantCN    string
		wantOrg   []string
		wantValid bool
	}{
		{name: "serving for 127.0.0.1", cert: servingCertFile, key: servingKeyFile, ca: caCertFile, usage: x509.ExtKeyUsageServerAuth, host: "127.0.0.1", wantCN: "kube-apiserver", wantValid: true},
		{name: "serving for localhost", cert: servingCertFile, key: servingKeyFile, ca: caCertFile, usage: x509.ExtKeyUsageServerAuth, host: "localhost", wantCN: "kube-apiserver", wantValid: true},
		{name: "serving not for other hosts", cert: servingCertFile, key: servingKeyFile, ca: caCertFile, usage: x509.ExtKeyUsageServerAuth, host: "example.com", wantCN: "kube-apiserver"},
		{name: "admin", cert: adminCertFile, key: adminKeyFile, ca: clientCACertFile, usage: x509.ExtKeyUsageClientAuth, wantCN: adminUser, wantOrg: []string{"system:masters"}, wantValid: true},
		{name: "admin not from the serving CA", cert: adminCertFile, key: adminKeyFile, ca: caCertFile, usage: x509.ExtKeyUsageClientAuth, wantCN: adminUser, wantOrg: []string{"system:masters"}},
		{name: "front-proxy client", cert: frontProxyClientCertFile, key: frontProxyClientKeyFile, ca: frontProxyCACertFile, usage: x509.ExtKeyUsageClientAuth, wantCN: frontProxyClientName, wantValid: true},
		{name: "front-proxy client not from the client CA", cert: frontProxyClientCertFile, key: frontProxyClientKeyFile, ca: clientCACertFile, usage: x509.ExtKeyUsageClientAuth, wantCN: frontProxyClientName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kp, err := loadKeyPair(file(tt.cert), file(tt.key))
			if err != nil {
				t.Fatal(err)
			}
			ca, err := loadCA(file(tt.ca), file(tt.ca[:len(tt.ca)-len(".crt")]+".key"))
			if err != nil {
				t.Fatal(err)
			}
			roots := x509.NewCertPool()
			roots.AddCert(ca.Cert)
			_, err = kp.Cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: tt.host, KeyUsages: []x509.ExtKeyUsage{tt.usage}})
			if got := err == nil; got != tt.wantValid {
				t.Errorf("verifies = %v (%v), want %v", got, err, tt.wantValid)
			}
			if got := kp.Cert.Subject.CommonName; got != tt.wantCN {
				t.Errorf("common name = %q, want %q", got, tt.wantCN)
			}
			if diff := cmp.Diff(kp.Cert.Subject.Organization, tt.wantOrg); diff != "" {
				t.Errorf("organizations (-got +want):\n%s", diff)
			}
		})
	}

	t.Run("kept on a second run", func(t *testing.T) {
		before, err := os.ReadFile(file(adminCertFile))
		if err != nil {
			t.Fatal(err)
		}
		if wrote, err := ensurePKI(dir); err != nil || wrote {
			t.Fatalf("ensurePKI a second time = %v, %v; want false, nil", wrote, err)
		}
		after, err := os.ReadFile(file(adminCertFile))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(after), string(before)); diff != "" {
			t.Errorf("admin certificate changed (-got +want):\n%s", diff)
		}
	})
}

func TestPortsPick(t *testing.T) {
	var ps ports
	seen := map[int]bool{}
	for range 50 {
		port, err := ps.pick(0)
		if err != nil {
			t.Fatal(err)
		}
		if port < 10000 || port >= 32768 {
			t.Errorf("port %d outside [10000, 32768)", port)
		}
		if seen[port] {
			t.Errorf("port %d handed out twice", port)
		}
		seen[port] = true
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	if got, err := ps.pick(busy); err != nil || got == busy {
		t.Errorf("pick(busy %d) = %d, %v; want another port", busy, got, err)
	}

	free, err := (&ports{}).pick(0)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ps.pick(free); err != nil || got != free {
		t.Errorf("pick(free %d) = %d, %v; want it", free, got, err)
	}
	if got, err := ps.pick(free); err != nil || got == free {
		t.Errorf("pick(%d) a second time = %d, %v; want another port", free, got, err)
	}
}

func TestAlive(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A child that exits and is not reaped stays a zombie, which is gone.
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	defer zombie.Wait()
	poll.Until(t, 5*time.Second, "the child is a zombie", func(context.Context) error {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(zombie.Process.Pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		if !containsState(stat, 'Z') {
			return fmt.Errorf("child %d is not a zombie: %s", zombie.Process.Pid, stat)
		}
		return nil
	})

	tests := []struct {
		name   string
		pid    int
		binary string
		want   bool
	}{
		{name: "this program", pid: os.Getpid(), binary: os.Args[0], want: true},
		{name: "this pid, another program", pid: os.Getpid(), binary: "/usr/bin/etcd-not-this", want: false},
		{name: "zombie", pid: zombie.Process.Pid, binary: "true", want: false},
		{name: "no such pid", pid: 1 << 30, binary: self, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := spawner.Alive(tt.pid, tt.binary); got != tt.want {
				t.Errorf("spawner.Alive(%d, %q) = %v, want %v", tt.pid, tt.binary, got, tt.want)
			}
		})
	}
}

// containsState reports whether a /proc/PID/stat line shows state s.
func containsState(stat []byte, s byte) bool {
	for i := len(stat) - 1; i >= 0; i-- {
		if stat[i] == ')' {
			return i+2 < len(stat) && stat[i+2] == s
		}
	}
	return false
}

func TestURLPort(t *testing.T) {
	tests := []struct {
		url  string
		want int
	}{
		{url: "http://127.0.0.1:2379", want: 2379},
		{url: "https://127.0.0.1:16443/", want: 16443},
		{url: "http://localhost", want: 0},
		{url: "", want: 0},
	}
	for _, tt := range tests {
		if got := urlPort(tt.url); got != tt.want {
			t.Errorf("urlPort(%q) = %d, want %d", tt.url, got, tt.want)
		}
	}
}

func TestRepoRoot(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "tools", "kube", "build.sh")); err != nil {
		t.Errorf("RepoRoot() = %s, which has no tools/kube/build.sh: %v", root, err)
	}
}
