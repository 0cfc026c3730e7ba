package pki

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

const testNamespace = "example-com"

var secretsResource = corev1.SchemeGroupVersion.WithResource("secrets")

// ensureAll runs an Ensurer for every Secret at now and fails the test on
// error.
func ensureAll(t *testing.T, client *fake.Clientset, now time.Time) (*CA, []Result) {
	t.Helper()
	leaves, err := SetAll.Leaves(testNamespace)
	if err != nil {
		t.Fatal(err)
	}
	e := &Ensurer{Client: client, Namespace: testNamespace, Now: func() time.Time { return now }}
	ca, results, err := e.Ensure(context.Background(), leaves)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	return ca, results
}

// lines are the results as kos-pki prints them.
func lines(results []Result) []string {
	var out []string
	for _, r := range results {
		out = append(out, r.String())
	}
	return out
}

// secretData returns the data of every Secret in the namespace, by name.
func secretData(t *testing.T, client *fake.Clientset) map[string]map[string][]byte {
	t.Helper()
	list, err := client.CoreV1().Secrets(testNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][]byte{}
	for _, s := range list.Items {
		out[s.Name] = s.Data
	}
	return out
}

// verifyAll checks that every leaf Secret holds a certificate of its leaf
// that verifies against ca.
func verifyAll(t *testing.T, client *fake.Clientset, ca *CA, now time.Time) {
	t.Helper()
	leaves, _ := SetAll.Leaves(testNamespace)
	data := secretData(t, client)
	for _, l := range leaves {
		d := data[l.Secret]
		if reason := ca.Check(l, d[corev1.TLSCertKey], d[corev1.TLSPrivateKeyKey], d[CACertKey], now); reason != "" {
			t.Errorf("secret %s: %s", l.Secret, reason)
		}
	}
}

func TestEnsureCreatesThenKeeps(t *testing.T) {
	client := fake.NewClientset()
	ca, results := ensureAll(t, client, testNow)
	want := []string{
		"secret example-com/kos-ca created",
		"secret example-com/kos-etcd-server created",
		"secret example-com/kos-etcd-peer created",
		"secret example-com/kos-etcd-client created",
		"secret example-com/kos-apiserver-serving created",
	}
	if diff := cmp.Diff(want, lines(results)); diff != "" {
		t.Errorf("first run (-want +got):\n%s", diff)
	}
	verifyAll(t, client, ca, testNow)
	for _, r := range results {
		if r.Secret == nil || r.Secret.Labels[ManagedByLabel] != FieldManager {
			t.Errorf("%s: secret %v lacks the managed-by label", r.Object, r.Secret)
		}
	}
	ca2, err := ParseCA(results[0].Secret.Data[CACertKey], results[0].Secret.Data[CAKeyKey])
	if err != nil || !ca2.Cert.Equal(ca.Cert) {
		t.Errorf("the CA Secret holds another CA than Ensure returned (%v)", err)
	}
	if got := results[0].Secret.Type; got != corev1.SecretTypeOpaque {
		t.Errorf("CA secret type %q, want Opaque", got)
	}
	if got := results[1].Secret.Type; got != corev1.SecretTypeTLS {
		t.Errorf("leaf secret type %q, want kubernetes.io/tls", got)
	}

	before := secretData(t, client)
	_, results = ensureAll(t, client, testNow.Add(24*time.Hour))
	for i := range want {
		want[i] = strings.Replace(want[i], "created", "kept", 1)
	}
	if diff := cmp.Diff(want, lines(results)); diff != "" {
		t.Errorf("second run (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, secretData(t, client)); diff != "" {
		t.Errorf("second run changed secrets (-before +after):\n%s", diff)
	}
}

func TestEnsureRenews(t *testing.T) {
	later := testNow.Add(LeafValidity - RenewBefore + time.Hour)
	tests := []struct {
		name string
		// change changes the cluster after a first run.
		change func(t *testing.T, client *fake.Clientset)
		now    time.Time
		want   []string
		// wantSameCA says whether the CA must be the first run's.
		wantSameCA bool
	}{{
		name:   "near expiry",
		change: func(*testing.T, *fake.Clientset) {},
		now:    later,
		want: []string{
			"secret example-com/kos-ca kept",
			"secret example-com/kos-etcd-server renewed (expires 2027-03-01)",
			"secret example-com/kos-etcd-peer renewed (expires 2027-03-01)",
			"secret example-com/kos-etcd-client renewed (expires 2027-03-01)",
			"secret example-com/kos-apiserver-serving renewed (expires 2027-03-01)",
		},
		wantSameCA: true,
	}, {
		name: "certificate garbled",
		change: func(t *testing.T, client *fake.Clientset) {
			updateSecret(t, client, EtcdPeerSecret, func(s *corev1.Secret) { s.Data[corev1.TLSCertKey] = []byte("garbage") })
		},
		now: testNow,
		want: []string{
			"secret example-com/kos-ca kept",
			"secret example-com/kos-etcd-server kept",
			"secret example-com/kos-etcd-peer renewed (certificate and key unreadable or not a pair)",
			"secret example-com/kos-etcd-client kept",
			"secret example-com/kos-apiserver-serving kept",
		},
		wantSameCA: true,
	}, {
		name: "CA deleted",
		change: func(t *testing.T, client *fake.Clientset) {
			if err := client.CoreV1().Secrets(testNamespace).Delete(context.Background(), CASecret, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		},
		now: testNow,
		want: []string{
			"secret example-com/kos-ca created",
			"secret example-com/kos-etcd-server renewed (not signed by the CA)",
			"secret example-com/kos-etcd-peer renewed (not signed by the CA)",
			"secret example-com/kos-etcd-client renewed (not signed by the CA)",
			"secret example-com/kos-apiserver-serving renewed (not signed by the CA)",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			first, _ := ensureAll(t, client, testNow)
			tt.change(t, client)
			ca, results := ensureAll(t, client, tt.now)
			if diff := cmp.Diff(tt.want, lines(results)); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if got := ca.Cert.Equal(first.Cert); got != tt.wantSameCA {
				t.Errorf("same CA as before: %v, want %v", got, tt.wantSameCA)
			}
			verifyAll(t, client, ca, tt.now)
		})
	}
}

func TestEnsureLeafNamesChanged(t *testing.T) {
	client := fake.NewClientset()
	ca, _ := ensureAll(t, client, testNow)
	l := APIServerServing(testNamespace)
	l.DNSNames = append(l.DNSNames, "kos.example.org")
	e := &Ensurer{Client: client, Namespace: testNamespace, Now: func() time.Time { return testNow }}
	r, err := e.EnsureLeaf(context.Background(), ca, l)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.String(), "secret example-com/kos-apiserver-serving renewed (names changed)"; got != want {
		t.Errorf("result %q, want %q", got, want)
	}
	if reason := ca.Check(l, r.Secret.Data[corev1.TLSCertKey], r.Secret.Data[corev1.TLSPrivateKeyKey], r.Secret.Data[CACertKey], testNow); reason != "" {
		t.Errorf("renewed certificate: %s", reason)
	}
}

func TestEnsureKeepsSecretsItDidNotMake(t *testing.T) {
	theirs := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: EtcdClientSecret},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: []byte("theirs"), corev1.TLSPrivateKeyKey: []byte("theirs")},
	}
	client := fake.NewClientset(theirs)
	_, results := ensureAll(t, client, testNow)
	if got, want := results[3].String(), "secret example-com/kos-etcd-client kept (not made by kos-pki, not checked)"; got != want {
		t.Errorf("result %q, want %q", got, want)
	}
	if diff := cmp.Diff(theirs.Data, secretData(t, client)[EtcdClientSecret]); diff != "" {
		t.Errorf("their secret changed (-want +got):\n%s", diff)
	}
}

func TestEnsureUnusableCA(t *testing.T) {
	client := fake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: CASecret},
		Data:       map[string][]byte{CACertKey: []byte("garbage")},
	})
	e := &Ensurer{Client: client, Namespace: testNamespace}
	_, _, err := e.Ensure(context.Background(), nil)
	want := "secret example-com/kos-ca holds no usable CA (delete it to make a new one, which re-issues every certificate): reading the CA certificate: no PEM certificate"
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

func TestEnsureExpiringCA(t *testing.T) {
	ca, err := NewCA("old", testNow.Add(-CAValidity+10*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	e := &Ensurer{Client: fake.NewClientset(), Namespace: testNamespace, Now: func() time.Time { return testNow }}
	if _, err := e.Client.CoreV1().Secrets(testNamespace).Create(context.Background(), e.caSecret(ca), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.Ensure(context.Background(), []Leaf{EtcdClient()})
	want := "the CA of secret example-com/kos-ca cannot sign a lasting certificate for kos-etcd-client (expires 2026-03-11): replace the CA, or delete its Secret to make a new one"
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

// TestEnsureLosesRaces has another run win every create and every update
// just before this one makes it: this run must end with the winner's CA
// and certificates.
func TestEnsureLosesRaces(t *testing.T) {
	// The winner's Secrets, made by a run of its own.
	winner := fake.NewClientset()
	winnerCA, _ := ensureAll(t, winner, testNow)
	winnerData := secretData(t, winner)

	client := fake.NewClientset()
	client.PrependReactor("create", "secrets", func(action clienttesting.Action) (bool, runtime.Object, error) {
		s := action.(clienttesting.CreateAction).GetObject().(*corev1.Secret)
		won := s.DeepCopy()
		won.Data = winnerData[s.Name]
		if err := client.Tracker().Create(secretsResource, won, s.Namespace); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewAlreadyExists(secretsResource.GroupResource(), s.Name)
	})
	ca, results := ensureAll(t, client, testNow)
	if !ca.Cert.Equal(winnerCA.Cert) {
		t.Errorf("the run that lost uses its own CA")
	}
	for _, r := range results {
		if r.Action != Kept {
			t.Errorf("%s, want it kept as the winner made it", r)
		}
	}
	if diff := cmp.Diff(winnerData, secretData(t, client)); diff != "" {
		t.Errorf("secrets are not the winner's (-want +got):\n%s", diff)
	}

	// Now the winner renews first: the loser's update conflicts.
	client.ReactionChain = client.ReactionChain[1:]
	later := testNow.Add(LeafValidity - RenewBefore + time.Hour)
	renewedBy := map[string]bool{}
	client.PrependReactor("update", "secrets", func(action clienttesting.Action) (bool, runtime.Object, error) {
		s := action.(clienttesting.UpdateAction).GetObject().(*corev1.Secret)
		if renewedBy[s.Name] {
			return false, nil, nil
		}
		renewedBy[s.Name] = true
		leaves, _ := SetAll.Leaves(testNamespace)
		for _, l := range leaves {
			if l.Secret == s.Name {
				kp := issue(t, ca, l, later)
				current, err := client.Tracker().Get(secretsResource, s.Namespace, s.Name)
				if err != nil {
					return true, nil, err
				}
				won := current.(*corev1.Secret).DeepCopy()
				won.Data[corev1.TLSCertKey], won.Data[corev1.TLSPrivateKeyKey] = kp.CertPEM, kp.KeyPEM
				if err := client.Tracker().Update(secretsResource, won, s.Namespace); err != nil {
					return true, nil, err
				}
			}
		}
		return true, nil, apierrors.NewConflict(secretsResource.GroupResource(), s.Name, nil)
	})
	before := secretData(t, client)
	_, results = ensureAll(t, client, later)
	for _, r := range results {
		if r.Action != Kept {
			t.Errorf("%s, want it kept as the winner renewed it", r)
		}
	}
	after := secretData(t, client)
	for _, name := range []string{EtcdServerSecret, EtcdPeerSecret, EtcdClientSecret, APIServerServingSecret} {
		if !renewedBy[name] {
			t.Errorf("secret %s: no update was tried", name)
		}
		if cmp.Equal(before[name], after[name]) {
			t.Errorf("secret %s: the winner's renewal is gone", name)
		}
	}
	verifyAll(t, client, ca, later)
}

func TestEnsureErrorsSayWhatToDo(t *testing.T) {
	tests := []struct {
		name  string
		verb  string
		err   error
		wants string
	}{{
		name:  "forbidden get",
		verb:  "get",
		err:   apierrors.NewForbidden(secretsResource.GroupResource(), CASecret, nil),
		wants: `reading secret example-com/kos-ca: grant get on secrets in namespace example-com to this identity: secrets "kos-ca" is forbidden: <nil>`,
	}, {
		name:  "forbidden create",
		verb:  "create",
		err:   apierrors.NewForbidden(secretsResource.GroupResource(), CASecret, nil),
		wants: `creating secret example-com/kos-ca: grant create on secrets in namespace example-com to this identity: secrets "kos-ca" is forbidden: <nil>`,
	}, {
		name:  "no namespace",
		verb:  "create",
		err:   apierrors.NewNotFound(corev1.Resource("namespaces"), testNamespace),
		wants: `creating secret example-com/kos-ca: create namespace example-com first: namespaces "example-com" not found`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			client.PrependReactor(tt.verb, "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, tt.err
			})
			e := &Ensurer{Client: client, Namespace: testNamespace}
			_, _, err := e.Ensure(context.Background(), nil)
			if err == nil || err.Error() != tt.wants {
				t.Errorf("error %v, want %q", err, tt.wants)
			}
		})
	}
}

func updateSecret(t *testing.T, client *fake.Clientset, name string, change func(*corev1.Secret)) {
	t.Helper()
	secrets := client.CoreV1().Secrets(testNamespace)
	s, err := secrets.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	change(s)
	if _, err := secrets.Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestEnsuredChainsVerify checks the chains of what Ensure stored, parsed
// back from the Secrets, for every usage.
func TestEnsuredChainsVerify(t *testing.T) {
	client := fake.NewClientset()
	_, results := ensureAll(t, client, testNow)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(results[0].Secret.Data[CACertKey]) {
		t.Fatal("no CA certificate in the CA Secret")
	}
	leaves, _ := SetAll.Leaves(testNamespace)
	for i, l := range leaves {
		s := results[i+1].Secret
		if !cmp.Equal(s.Data[CACertKey], results[0].Secret.Data[CACertKey]) {
			t.Errorf("secret %s: ca.crt is not the CA's certificate", s.Name)
		}
		cert, err := parseCert(s.Data[corev1.TLSCertKey])
		if err != nil {
			t.Fatalf("secret %s: %v", s.Name, err)
		}
		name := ""
		if len(l.DNSNames) > 0 {
			name = l.DNSNames[0]
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, CurrentTime: testNow, KeyUsages: l.Usages}); err != nil {
			t.Errorf("secret %s: %v", s.Name, err)
		}
	}
}
