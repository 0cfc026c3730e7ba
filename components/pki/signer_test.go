package pki

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/kubernetes/fake"
)

// TestSignerPass runs signer passes on a fake clock: the first makes every
// Secret and sleeps until the first leaf is due, the next at that time
// renews every leaf, and the metrics say when each certificate expires and
// how often it was renewed.
func TestSignerPass(t *testing.T) {
	const validity, renewBefore = time.Hour, 20 * time.Minute
	leaves, err := SetAll.Leaves(testNamespace)
	if err != nil {
		t.Fatal(err)
	}
	now := testNow
	ensurer := &Ensurer{Client: fake.NewClientset(), Namespace: testNamespace, Now: func() time.Time { return now }, LeafValidity: validity, RenewBefore: renewBefore}
	var out bytes.Buffer
	s := &Signer{
		Run:      &EnsureRun{cfg: completedEnsureConfig{EnsureConfig{Namespace: testNamespace, Leaves: leaves}}, ensurer: ensurer},
		Interval: 2 * time.Hour,
		Metrics:  NewSignerMetrics(),
		Out:      &out,
	}
	if s.Ready(nil) == nil {
		t.Error("ready before any pass")
	}
	wait, err := s.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := validity - renewBefore; wait < want || wait > want+time.Second {
		t.Errorf("after the first pass the signer waits %s, want just over %s (the leaves' renewal time)", wait, want)
	}
	if err := s.Ready(nil); err != nil {
		t.Errorf("not ready after a pass: %v", err)
	}
	if got := strings.Count(out.String(), " created"); got != 5 {
		t.Errorf("the first pass printed %d created lines, want 5:\n%s", got, out.String())
	}
	for _, l := range leaves {
		got := testutil.ToFloat64(s.Metrics.Expiry.WithLabelValues(testNamespace, l.Secret))
		if want := float64(now.Add(validity).Unix()); got != want {
			t.Errorf("expiry of %s is %v, want %v", l.Secret, got, want)
		}
	}
	if got := testutil.ToFloat64(s.Metrics.Expiry.WithLabelValues(testNamespace, CASecret)); got != float64(now.Add(CAValidity).Unix()) {
		t.Errorf("expiry of %s is %v, want %v", CASecret, got, now.Add(CAValidity).Unix())
	}

	now = now.Add(wait)
	out.Reset()
	wait, err = s.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), " renewed"); got != 4 {
		t.Errorf("the pass at the renewal time printed %d renewed lines, want 4:\n%s", got, out.String())
	}
	if want := validity - renewBefore; wait < want || wait > want+time.Second {
		t.Errorf("after renewing the signer waits %s, want just over %s", wait, want)
	}
	for _, l := range leaves {
		if got := testutil.ToFloat64(s.Metrics.Renewals.WithLabelValues(testNamespace, l.Secret)); got != 1 {
			t.Errorf("renewals of %s: %v, want 1", l.Secret, got)
		}
	}

	// Nothing due: the next pass keeps everything and waits out the rest.
	now = now.Add(time.Minute)
	out.Reset()
	wait, err = s.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Errorf("a pass with nothing due printed:\n%s", out.String())
	}
	if want := validity - renewBefore - time.Minute; wait < want || wait > want+time.Second {
		t.Errorf("with nothing due the signer waits %s, want just over %s", wait, want)
	}
}
