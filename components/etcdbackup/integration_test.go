package etcdbackup_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllers/ipam"
	"github.com/kos-sdn/kos/components/etcdbackup"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestMain stops the control plane the integration tests start on first
// use (testenv.Shared).
func TestMain(m *testing.M) { testenv.Main(m) }

// TestIntegrationBackupRestore backs up a real kos-apiserver's etcd (TLS with
// client certificates, as in the addon) to a folder and to a real S3 server,
// loses etcd's data folder, and restores it from each: every Subnet,
// NetworkAttachment and IPLock comes back as it was, with the same
// addresses, and the API takes writes again. A damaged snapshot is refused
// and leaves the data folder as it was.
func TestIntegrationBackupRestore(t *testing.T) {
	ctx := t.Context()
	env := testenv.Shared(t)
	kos, err := env.StartKOS(ctx, testenv.KOSOptions{Name: fmt.Sprintf("backup-%d", time.Now().UnixNano()%100000), DirectOnly: true, EtcdTLS: true})
	if err != nil {
		t.Fatalf("starting kos-apiserver: %v", err)
	}
	t.Cleanup(func() { kos.Stop() })
	client := newKOSClient(t, kos)
	ns := newNamespace(t, env)
	want := populate(t, client, ns)

	s3, err := testenv.StartS3(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("starting S3: %v", err)
	}
	t.Cleanup(func() { s3.Stop() })
	if err := s3.CreateBucket(ctx, "kos-backups"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	t.Setenv("AWS_REGION", s3.Region)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))

	backups := t.TempDir()
	save := []string{"save",
		"--endpoints", kos.EtcdURL, "--cacert", kos.EtcdCAFile, "--cert", kos.EtcdCertFile, "--key", kos.EtcdKeyFile,
		"--dir", backups, "--keep", "2",
		"--s3", "s3://kos-backups/cluster-a", "--s3-endpoint", s3.Endpoint, "--s3-keep", "2",
		"--defrag", "--defrag-min-free-bytes", "0", "--defrag-min-free-ratio", "0"}
	// Three runs, a second apart (names have seconds): two snapshots stay
	// in each place, the newest.
	var saved []string
	for i := range 3 {
		if i > 0 {
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		}
		began := time.Now()
		out := run(t, etcdbackup.ExitOK, save...)
		t.Logf("save %d took %s:\n%s", i+1, time.Since(began).Round(time.Millisecond), out)
		for _, step := range []string{"saved " + backups, "uploaded s3://kos-backups/cluster-a/kos-etcd-", "defragmented " + kos.EtcdMember} {
			if !strings.Contains(out, step) {
				t.Errorf("save printed no line with %q", step)
			}
		}
		newest, err := etcdbackup.Newest(backups)
		if err != nil {
			t.Fatal(err)
		}
		saved = append(saved, filepath.Base(newest))
	}
	local, err := etcdbackup.List(backups)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(local, saved[1:]); diff != "" {
		t.Errorf("snapshots kept in the folder (-got +want):\n%s", diff)
	}
	store, err := etcdbackup.NewS3(ctx, "s3://kos-backups/cluster-a/", s3.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(remote, saved[1:]); diff != "" {
		t.Errorf("snapshots kept in S3 (-got +want):\n%s", diff)
	}
	snapshot := filepath.Join(backups, saved[2])

	// What happens after the snapshot is what a restore undoes.
	deleteAll(t, client, ns)

	// A damaged copy of the snapshot is refused, even with --replace, and
	// the data folder stays as it was.
	stopAll(t, kos)
	damaged := filepath.Join(t.TempDir(), filepath.Base(snapshot))
	data, err := os.ReadFile(snapshot)
	if err != nil {
		t.Fatal(err)
	}
	data[4096] ^= 0xff
	if err := os.WriteFile(damaged, data, 0o600); err != nil {
		t.Fatal(err)
	}
	before := tree(t, kos.EtcdDataDir)
	run(t, etcdbackup.ExitError, restoreArgs(kos, damaged, "--replace")...)
	if diff := cmp.Diff(tree(t, kos.EtcdDataDir), before); diff != "" {
		t.Errorf("etcd's data folder after a refused restore (-got +want):\n%s", diff)
	}

	for _, tc := range []struct{ name, from string }{
		{"dir", backups},
		{"s3", "s3://kos-backups/cluster-a/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Lose the data.
			if err := os.RemoveAll(kos.EtcdDataDir); err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			out := run(t, etcdbackup.ExitOK, append(restoreArgs(kos, tc.from), "--s3-endpoint", s3.Endpoint)...)
			t.Logf("restored in %s:\n%s", time.Since(began).Round(time.Millisecond), out)
			if err := kos.RestartEtcd(ctx); err != nil {
				t.Fatalf("starting etcd on the restored data: %v", err)
			}
			if err := kos.Restart(ctx); err != nil {
				t.Fatalf("restarting kos-apiserver: %v", err)
			}
			client := newKOSClient(t, kos)
			if diff := cmp.Diff(list(t, client, ns), want); diff != "" {
				t.Errorf("objects after the restore (-got +want):\n%s", diff)
			}
			// It takes writes again: the next round restores over them.
			deleteAll(t, client, ns)
			stopAll(t, kos)
		})
	}
	if err := kos.RestartEtcd(ctx); err != nil {
		t.Fatalf("starting etcd again: %v", err)
	}
}

// run runs kos-etcd-backup with args, expects the exit code want and returns
// its standard output.
func run(t *testing.T, want int, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if got := etcdbackup.Main(t.Context(), args, &stdout, &stderr); got != want {
		t.Fatalf("kos-etcd-backup %s: exit code %d, want %d\nstdout: %s\nstderr: %s", args[0], got, want, stdout.String(), stderr.String())
	}
	if want != etcdbackup.ExitOK {
		t.Logf("kos-etcd-backup %s refused as it should: %s", args[0], stderr.String())
	}
	return stdout.String()
}

// restoreArgs restores the etcd of kos from a snapshot.
func restoreArgs(kos *testenv.KOS, from string, more ...string) []string {
	return append([]string{"restore", "--from", from, "--data-dir", kos.EtcdDataDir,
		"--name", kos.EtcdMember, "--initial-advertise-peer-urls", kos.EtcdPeerURL,
		"--initial-cluster", kos.EtcdMember + "=" + kos.EtcdPeerURL}, more...)
}

// stopAll stops kos-apiserver and its etcd.
func stopAll(t *testing.T, kos *testenv.KOS) {
	t.Helper()
	if err := kos.Stop(); err != nil {
		t.Fatalf("stopping kos-apiserver: %v", err)
	}
	if err := kos.StopEtcd(); err != nil {
		t.Fatalf("stopping etcd: %v", err)
	}
}

func newKOSClient(t *testing.T, kos *testenv.KOS) kosclient.Interface {
	t.Helper()
	c, err := kosclient.NewForConfig(kos.DirectConfig)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newNamespace(t *testing.T, env *testenv.Env) string {
	t.Helper()
	return env.NewNamespace(t, "backup-")
}

// objects are the KOS objects of one namespace.
type objects struct {
	Subnets     []v1alpha1.Subnet
	Attachments []v1alpha1.NetworkAttachment
	Locks       []v1alpha1.IPLock
}

// populate creates subnets, attachments with addresses and their IP locks,
// as IPAM would, and returns them as a list reads them.
func populate(t *testing.T, client kosclient.Interface, ns string) objects {
	t.Helper()
	ctx := t.Context()
	c := client.NetworkV1alpha1()
	for s := range 3 {
		vni := uint32(100 + s)
		subnet := &v1alpha1.Subnet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("s%d", s)},
			Spec:       v1alpha1.SubnetSpec{IPv4: fmt.Sprintf("10.%d.0.0/24", 100+s), VNI: vni},
		}
		if _, err := c.Subnets(ns).Create(ctx, subnet, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating subnet: %v", err)
		}
		for a := range 4 {
			att := &v1alpha1.NetworkAttachment{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("s%d-a%d", s, a)},
				Spec:       v1alpha1.NetworkAttachmentSpec{Node: fmt.Sprintf("node-%d", a%2), Subnet: subnet.Name},
			}
			got, err := c.NetworkAttachments(ns).Create(ctx, att, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("creating attachment: %v", err)
			}
			addr := netip.AddrFrom4([4]byte{10, byte(100 + s), 0, byte(10 + a)})
			lock := &v1alpha1.IPLock{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ipam.LockName(vni, addr)},
				Spec:       v1alpha1.IPLockSpec{SubnetName: subnet.Name},
			}
			if _, err := c.IPLocks(ns).Create(ctx, lock, metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating IP lock: %v", err)
			}
			got.Status.IPv4, got.Status.AddressVNI = addr.String(), vni
			if _, err := c.NetworkAttachments(ns).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("setting the address of an attachment: %v", err)
			}
		}
	}
	got := list(t, client, ns)
	if len(got.Subnets) != 3 || len(got.Attachments) != 12 || len(got.Locks) != 12 {
		t.Fatalf("created %d subnets, %d attachments, %d locks; want 3, 12, 12", len(got.Subnets), len(got.Attachments), len(got.Locks))
	}
	for _, a := range got.Attachments {
		if a.Status.IPv4 == "" {
			t.Fatalf("attachment %s has no address", a.Name)
		}
	}
	return got
}

// list reads every KOS object of ns.
func list(t *testing.T, client kosclient.Interface, ns string) objects {
	t.Helper()
	ctx := t.Context()
	c := client.NetworkV1alpha1()
	subnets, err := c.Subnets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing subnets: %v", err)
	}
	atts, err := c.NetworkAttachments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing attachments: %v", err)
	}
	locks, err := c.IPLocks(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing IP locks: %v", err)
	}
	return objects{Subnets: subnets.Items, Attachments: atts.Items, Locks: locks.Items}
}

// deleteAll deletes every KOS object of ns.
func deleteAll(t *testing.T, client kosclient.Interface, ns string) {
	t.Helper()
	ctx := t.Context()
	c := client.NetworkV1alpha1()
	all := metav1.ListOptions{}
	del := metav1.DeleteOptions{}
	for _, err := range []error{
		c.IPLocks(ns).DeleteCollection(ctx, del, all),
		c.NetworkAttachments(ns).DeleteCollection(ctx, del, all),
		c.Subnets(ns).DeleteCollection(ctx, del, all),
	} {
		if err != nil {
			t.Fatalf("deleting the objects of %s: %v", ns, err)
		}
	}
	if got := list(t, client, ns); len(got.Subnets)+len(got.Attachments)+len(got.Locks) != 0 {
		t.Fatalf("objects left after deleting: %+v", got)
	}
}

// tree lists every path under dir with its size.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		paths = append(paths, fmt.Sprintf("%s %d %s", path, info.Size(), info.ModTime()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

// TestIntegrationDefragDisarm checks defrag's policy and --disarm-nospace on
// a real etcd whose NOSPACE alarm is raised: the KOS API refuses writes until
// the alarm is cleared, then takes them again.
func TestIntegrationDefragDisarm(t *testing.T) {
	ctx := t.Context()
	env := testenv.Shared(t)
	kos, err := env.StartKOS(ctx, testenv.KOSOptions{Name: fmt.Sprintf("defrag-%d", time.Now().UnixNano()%100000), DirectOnly: true, EtcdTLS: true})
	if err != nil {
		t.Fatalf("starting kos-apiserver: %v", err)
	}
	t.Cleanup(func() { kos.Stop() })
	client := newKOSClient(t, kos)
	ns := newNamespace(t, env)
	subnets := 0
	subnet := func(name string) error {
		subnets++
		_, err := client.NetworkV1alpha1().Subnets(ns).Create(ctx, &v1alpha1.Subnet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       v1alpha1.SubnetSpec{IPv4: fmt.Sprintf("10.77.%d.0/24", subnets), VNI: 77},
		}, metav1.CreateOptions{})
		return err
	}
	if err := subnet("before"); err != nil {
		t.Fatal(err)
	}

	tlsConfig, err := (transport.TLSInfo{TrustedCAFile: kos.EtcdCAFile, CertFile: kos.EtcdCertFile, KeyFile: kos.EtcdKeyFile}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{kos.EtcdURL}, TLS: tlsConfig, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	st, err := etcd.Status(ctx, kos.EtcdURL)
	if err != nil {
		t.Fatal(err)
	}
	// What a member does when its database reaches the quota.
	_, err = etcdserverpb.NewMaintenanceClient(etcd.ActiveConnection()).Alarm(ctx, &etcdserverpb.AlarmRequest{
		Action:   etcdserverpb.AlarmRequest_ACTIVATE,
		MemberID: st.Header.GetMemberId(),
		Alarm:    etcdserverpb.AlarmType_NOSPACE,
	})
	if err != nil {
		t.Fatalf("raising the NOSPACE alarm: %v", err)
	}
	if err := subnet("refused"); err == nil || !strings.Contains(err.Error(), "space exceeded") {
		t.Fatalf("creating a subnet with the alarm raised: %v, want database space exceeded", err)
	}

	// The default policy finds nothing worth defragmenting in a small
	// database, and says so; the alarm is cleared.
	out := run(t, etcdbackup.ExitOK, "defrag", "--disarm-nospace",
		"--endpoints", kos.EtcdURL, "--cacert", kos.EtcdCAFile, "--cert", kos.EtcdCertFile, "--key", kos.EtcdKeyFile)
	t.Logf("defrag:\n%s", out)
	for _, want := range []string{"defrag of " + kos.EtcdMember + " (" + kos.EtcdURL + ") skipped: ", "disarmed the NOSPACE alarm of member"} {
		if !strings.Contains(out, want) {
			t.Errorf("defrag printed no line with %q", want)
		}
	}
	if err := subnet("after"); err != nil {
		t.Errorf("creating a subnet after the alarm was cleared: %v", err)
	}
}
