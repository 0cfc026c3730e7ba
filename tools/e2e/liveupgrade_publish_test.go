package e2e

// This file holds how the live upgrade's cluster gets its releases: the
// released images pushed and the release tree served, kOps's own channels
// built and run, and the nodes' addresses moved onto their own Open vSwitch.

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/nodeovs"
	"github.com/kos-sdn/kos/tools/addons/release"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosimages/catalog"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// testPublish pushes to the cluster's registry the images of lu.old, then
// those of lu.new, each built from the commit that made the release with
// its own tooling (pushReleased), or today's for a release not made yet;
// the second replace the tags both have (etcd, when both name the same
// version: the pinned references stay valid). It writes the
// release tree for that registry with every image pinned, and the
// channels of both releases with the userspace agent, and serves it over
// HTTPS. It also gives every node its local volume for etcd.
func (lu *liveUpgrade) testPublish(t *testing.T) {
	ctx := t.Context()
	began := time.Now()
	repo := lu.env.Registry + "/" + registryPrefix
	digests := lu.pushReleased(t, repo, lu.old)
	figures.Duration(t, "live-images-"+lu.old+"-built-and-pushed", time.Since(began))

	newBegan := time.Now()
	if _, released := catalog.Releases[lu.new]; released {
		maps.Copy(digests, lu.pushReleased(t, repo, lu.new))
	} else {
		maps.Copy(digests, lu.pushImages(t, repo))
	}
	figures.Duration(t, "live-images-"+lu.new+"-built-and-pushed", time.Since(newBegan))

	lu.tree = filepath.Join(lu.t.TempDir(), "release")
	written, err := release.Write(ctx, release.Options{Root: lu.root, Out: lu.tree, Registry: repo, Digests: digests})
	if err != nil {
		t.Fatalf("writing the release tree: %v", err)
	}
	t.Logf("images the release names by tag only: %v", written.Unpinned)
	if lu.oldChannel, err = kosinstall.WriteReleaseChannel(lu.tree, "kos-"+lu.old+".yaml", semver.MustParse(lu.old)); err != nil {
		t.Fatal(err)
	}
	if lu.newChannel, err = kosinstall.WriteReleaseChannel(lu.tree, "kos-"+lu.new+".yaml", semver.MustParse(lu.new)); err != nil {
		t.Fatal(err)
	}
	lu.https = serveTree(t, lu.t, lu.env.Nodes[0].HostIP, lu.tree)
	lu.channelsBin = testenv.Build(t, "cmd/channels")
	lu.kopsBin = kopsChannelsBin(t, lu.root)
	lu.provideVolumes(t)
	lu.podImage = pushPodnet(t, lu.env.Registry)
	figures.Duration(t, "live-published", time.Since(began))
}

// kopsChannelsBin returns kOps's own channels command, built by
// tools/kops/build.sh (cached), or $KOS_KOPS_BIN_DIR's.
func kopsChannelsBin(t *testing.T, root string) string {
	t.Helper()
	dir := os.Getenv("KOS_KOPS_BIN_DIR")
	if dir == "" {
		var stderr bytes.Buffer
		cmd := exec.CommandContext(t.Context(), filepath.Join(root, "tools", "kops", "build.sh"))
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("building kOps's channels with tools/kops/build.sh: %v\n%s", err, stderr.String())
		}
		dir = strings.TrimSpace(string(out))
	}
	bin := filepath.Join(dir, "channels")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("kOps's channels: %v", err)
	}
	return bin
}

// kopsApply applies the channel at the tree's path rel with kOps's own
// channels, as protokube runs it (over HTTPS, trusting the release server's
// CA), and fails the test when it fails.
func (lu *liveUpgrade) kopsApply(t *testing.T, rel string) {
	t.Helper()
	args := []string{"apply", "channel", lu.https.URL + rel, "--yes", "--v=2"}
	cmd := exec.CommandContext(t.Context(), lu.kopsBin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+lu.env.Kubeconfig, "HOME="+t.TempDir(), "SSL_CERT_FILE="+lu.https.CAFile)
	out, err := cmd.CombinedOutput()
	t.Logf("kOps channels %s:\n%s", strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("kOps channels %s: %v", strings.Join(args, " "), err)
	}
}

// testHostUnderlay moves each node's address onto bridge br-ul of its own
// Open vSwitch, as an operator of userspace-datapath nodes did for 0.1.0
// (whose agent runs no Open vSwitch; 0.2.0 and 0.3.0 adopt the node's
// Open vSwitch where there is one, with its bridges), and checks that the
// nodes stay Ready.
func (lu *liveUpgrade) testHostUnderlay(t *testing.T) {
	ctx := t.Context()
	for _, n := range lu.env.Nodes {
		u := nodeovs.NewUnderlay(nodeovs.UnderlayConfig{Address: n.IP, Bridge: underlayBridge, DatapathType: "netdev"}, n.OVSRunDir, lu.t.TempDir())
		if err := (&ovsenv.Netns{Name: n.Netns}).Do(func() error { return u.Ensure(ctx) }); err != nil {
			t.Fatalf("moving node %s's address onto %s: %v", n.Name, underlayBridge, err)
		}
	}
	poll.Until(t, time.Minute, "every node to be Ready", func(ctx context.Context) error {
		list, err := lu.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, n := range list.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
					return fmt.Errorf("node %s not Ready: %s", n.Name, c.Message)
				}
			}
		}
		return nil
	})
}

// pushReleased pushes the images of the released version to repo, as the
// commit that made it built them (catalog.BuildReleased, cached by commit in
// .cache/released), and returns their digests by tag.
func (lu *liveUpgrade) pushReleased(t *testing.T, repo, version string) map[string]string {
	ctx := t.Context()
	archive, err := catalog.BuildReleased(ctx, catalog.ReleasedOptions{Root: lu.root, Version: version, Progress: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	digests, err := catalog.PushArchive(ctx, archive, repo, false, append(slices.Clone(catalog.Components), catalog.Etcd)...)
	if err != nil {
		t.Fatalf("pushing the images of release %s to %s: %v", version, repo, err)
	}
	for tag := range digests {
		if image, v, _ := strings.Cut(tag, ":"); v != version && image != catalog.Registry+"/"+catalog.Etcd {
			t.Fatalf("release %s's tooling built %s", version, tag)
		}
	}
	return digests
}
