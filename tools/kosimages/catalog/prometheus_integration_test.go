package catalog

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/registry"
)

// TestIntegrationPrometheusImage pushes the Prometheus image to a real
// registry, pulls it by the pinned reference PushPrometheus returned,
// unpacks it and runs its entrypoint there with chroot, with nothing but
// what the image holds: it reports the version the image is tagged with,
// and serves as kos-monitoring's manifest runs it (user 65534, its flags,
// its data folder), scraping itself. It holds the program and exactly the
// libraries ldd names for it.
func TestIntegrationPrometheusImage(t *testing.T) {
	ctx := t.Context()
	if _, err := exec.LookPath(PrometheusProgram); err != nil {
		t.Fatalf("prometheus is not installed (tools/deps.sh installs it): %v", err)
	}
	reg := registry.StartT(t, registry.Options{Address: "127.0.0.1"})
	repo := reg.Host() + "/kos-test"
	pinned, err := PushPrometheus(ctx, repo, false)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewDigest(pinned)
	if err != nil {
		t.Fatalf("PushPrometheus returned %q: %v", pinned, err)
	}
	tag, _, _ := strings.Cut(pinned, "@")
	version := strings.TrimPrefix(tag, repo+"/"+Prometheus+":")
	if version == tag || version == "" {
		t.Fatalf("PushPrometheus returned %q, want %s/%s:VERSION@sha256:...", pinned, repo, Prometheus)
	}
	img, err := remote.Image(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("pulling %s: %v", ref, err)
	}
	if diff := cmp.Diff([]string{PrometheusProgram}, imageEntrypoint(t, img)); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}

	files, err := images.HostBinaries(ctx, PrometheusProgram)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		want = append(want, f.Path)
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	unpack(t, img, root)
	var got []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		got = append(got, "/"+filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("files of the image (-want +got):\n%s", diff)
	}

	out := chroot(t, root, nil, nil, PrometheusProgram, "--version")
	if v, err := PrometheusVersion(out); err != nil || v != version {
		t.Errorf("prometheus --version in the image says %q (%v), want version %s", out, err, version)
	}
	serve(t, root)
}

// serve runs the unpacked Prometheus as kos-monitoring's manifest does,
// as user 65534 with its data in /prometheus, scraping itself every
// second, until it reports itself up.
func serve(t *testing.T, root string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	config := fmt.Sprintf("global: {scrape_interval: 1s}\nscrape_configs:\n- job_name: self\n  static_configs: [{targets: [%q]}]\n", addr)
	if err := os.MkdirAll(filepath.Join(root, "etc", "prometheus", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "prometheus", "config", "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	// The manifest's emptyDir, which fsGroup 65534 makes writable.
	data := filepath.Join(root, "prometheus")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	cmd := chrootCommand(t, root, nil, nil, "65534:65534", PrometheusProgram,
		"--config.file=/etc/prometheus/config/prometheus.yml", "--storage.tsdb.path=/prometheus",
		"--storage.tsdb.retention.time=2d", "--web.listen-address="+addr)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
		if t.Failed() {
			t.Logf("prometheus's log:\n%s", log.String())
		}
	}()
	poll.Until(t, time.Minute, "the image's Prometheus to scrape itself", func(ctx context.Context) error {
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("prometheus exited: %v", err)
		default:
		}
		u := "http://" + addr + "/api/v1/query?query=" + url.QueryEscape(`up{job="self"} == 1`)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"job":"self"`) {
			return fmt.Errorf("%s: %s", resp.Status, body)
		}
		return nil
	})
}
