package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/channels/internal/channelstest"
	"github.com/kos-sdn/kos/tools/testenv"
)

// eventsFor returns the messages of the Events of a reason on Namespace
// kube-system that name addon.
func eventsFor(t *testing.T, k kubernetes.Interface, reason, addon string) []string {
	t.Helper()
	list, err := k.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + reason + ",involvedObject.kind=Namespace,involvedObject.name=kube-system"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if strings.HasPrefix(e.Message, "addon "+addon+": ") {
			out = append(out, e.Message)
		}
	}
	return out
}

// TestIntegrationDaemonNoReleaseFits runs daemon passes on a channel whose
// only range of one addon ends below the cluster's Kubernetes version,
// next to an addon that fits: each pass fails with a *BlockedError naming
// the cluster's version and the range offered (/readyz), sets
// channels_addon_blocked and posts one Warning Event NoReleaseFits however
// many passes see it.
func TestIntegrationDaemonNoReleaseFits(t *testing.T) {
	const ns = "daemon-cliff-app"
	env := testenv.Shared(t)
	k := kube(t)
	info, err := k.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	version, err := channels.ServerVersion(info.GitVersion)
	if err != nil {
		t.Fatal(err)
	}
	below := fmt.Sprintf(">=1.20.0 <1.%d.0", version.Minor)
	loc := channelstest.WriteChannel(t, t.TempDir(), "cliff.yaml",
		channelstest.Release{Name: "cliff", Version: "0.3.0", ID: "k8s-1.20", KubernetesVersion: below,
			Manifest: channelstest.Manifest(channelstest.Namespace(ns), channelstest.ConfigMap(ns, "cliff-config", "0.3.0"))},
		channelstest.Release{Name: "cliff-fits", Version: "1.0.0",
			Manifest: channelstest.Manifest(channelstest.Namespace(ns), channelstest.ConfigMap(ns, "cliff-fits", "1.0.0"))},
	)
	want := fmt.Sprintf(`addon "cliff": no release fits Kubernetes %s: the channels offer 0.3.0 (k8s-1.20) for %s`, version, below)

	d, err := New(env.RESTConfig, Options{Locations: []string{loc}, Interval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for pass := 1; pass <= 2; pass++ {
		res := d.Pass(context.Background())
		var blocked *channels.BlockedError
		if !errors.As(res.Err, &blocked) || !strings.Contains(res.Err.Error(), want) || d.Ready() {
			t.Errorf("daemon pass %d: err %v, ready %v; want a *BlockedError with %q, not ready", pass, res.Err, d.Ready(), want)
		}
	}
	families, err := d.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var series []string
	for _, f := range families {
		if f.GetName() != "channels_addon_blocked" {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			series = append(series, fmt.Sprintf("%s %v", strings.Join(labels, ","), m.GetGauge().GetValue()))
		}
	}
	if diff := cmp.Diff(series, []string{"addon=cliff,reason=NoReleaseFits 1"}); diff != "" {
		t.Errorf("channels_addon_blocked (-got +want):\n%s", diff)
	}
	if got := eventsFor(t, k, "NoReleaseFits", "cliff"); len(got) != 1 || !strings.Contains(got[0], want[len(`addon "cliff": `):]) {
		t.Errorf("NoReleaseFits events = %q, want one naming the version and range", got)
	}
}
