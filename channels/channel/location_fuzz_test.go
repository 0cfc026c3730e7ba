package channel

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzResolveLocation resolves arbitrary manifest references against
// arbitrary channel locations. It must never panic; an absolute reference
// (a URL) stands alone; a result against a URL or an absolute path is itself
// a valid location; and resolving a result again changes nothing.
func FuzzResolveLocation(f *testing.F) {
	for _, s := range [][2]string{
		{"s3://bucket/kos/bootstrap-channel.yaml", "addons/kos-agent/0.1.0.yaml"},
		{"https://example.com/kos/channel.yaml", "../x/y.yaml"},
		{"https://example.com/kos/channel.yaml", "a:b.yaml"},
		{"https://example.com/kos/channel.yaml", "//other.example.com/z.yaml"},
		{"https://example.com/kos/channel.yaml", "?q=1#frag"},
		{"file:///srv/kos/channel.yaml", "kos-etcd/0.1.0.yaml"},
		{"/srv/kos/channel.yaml", "../m.yaml"},
		{"/srv/kos/channel.yaml", "/abs/m.yaml"},
		{"channel.yaml", "m.yaml"},
		{"bootstrap-channel.yaml", "s3://b/k"},
		{"HTTPS://Example.com/c.yaml", "file:relative"},
		{"s3://b/", "k"},
		{"ftp://x/y", "z"},
		{"https://[::1]:8443/c.yaml", "%zz"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, base, ref string) {
		got, err := ResolveLocation(base, ref)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
			return
		}
		if got == "" {
			t.Fatal("empty result without an error")
		}
		if isURL(ref) && got != ref {
			t.Fatalf("URL %q resolved to %q", ref, got)
		}
		b, err := parseLocation(base)
		if err != nil {
			if !isURL(ref) {
				t.Fatalf("resolved %q against invalid base %q to %q", ref, base, got)
			}
			return
		}
		if b.Scheme == "" && !filepath.IsAbs(b.Path) && !filepath.IsAbs(ref) && !isURL(ref) {
			return // relative to a relative path: stays relative
		}
		if _, err := parseLocation(got); err != nil {
			t.Fatalf("resolving %q against %q gave %q, not a location: %v", ref, base, got, err)
		}
		again, err := ResolveLocation(base, got)
		if err != nil {
			t.Fatalf("resolving result %q again against %q: %v", got, base, err)
		}
		if again != got {
			t.Fatalf("resolving %q against %q gave %q, then %q", ref, base, got, again)
		}
	})
}
