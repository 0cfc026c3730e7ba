package controllermanager_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllermanager"
	"github.com/kos-sdn/kos/components/controllers/ipam"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestMain stops the control plane the integration tests start on first
// use (testenv.Shared).
func TestMain(m *testing.M) { testenv.Main(m) }

var (
	kosOnce sync.Once
	kosSrv  *testenv.KOS
	kosErr  error
)

// startKOS starts the package's one kos-apiserver the first time a test
// asks. Tests keep apart by namespace and VNI.
func startKOS(t testing.TB) *testenv.KOS {
	t.Helper()
	env := testenv.Shared(t)
	kosOnce.Do(func() {
		kosSrv, kosErr = env.StartKOS(context.Background(), testenv.KOSOptions{})
	})
	if kosErr != nil {
		t.Fatalf("starting kos-apiserver: %v", kosErr)
	}
	return kosSrv
}

// kosClient returns a client that talks to kos-apiserver directly.
func kosClient(t testing.TB) versioned.Interface {
	t.Helper()
	c, err := versioned.NewForConfig(startKOS(t).DirectConfig)
	if err != nil {
		t.Fatalf("creating a KOS client: %v", err)
	}
	return c
}

// startManager runs an in-process controller manager, with clients and
// informers of its own and without leader election, until the returned stop
// is called or the test ends.
func startManager(t testing.TB, name string, ipamWorkers int) (m *controllermanager.Manager, stop func()) {
	t.Helper()
	return startManagerWith(t, name, controllermanager.Config{SubnetValidatorWorkers: 2, IPAMWorkers: ipamWorkers})
}

// startManagerWith is startManager with the settings of cfg, whose clients
// it fills in when nil (as the admin).
func startManagerWith(t testing.TB, name string, cfg controllermanager.Config) (m *controllermanager.Manager, stop func()) {
	t.Helper()
	env := testenv.Shared(t)
	kos := startKOS(t)
	if cfg.Kube == nil {
		cfg.Kube = env.RESTConfig
	}
	if cfg.KOS == nil {
		cfg.KOS = kos.DirectConfig
	}
	m, err := cfg.Complete().New()
	if err != nil {
		t.Fatalf("creating manager %s: %v", name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ctx = klog.NewContext(ctx, klog.Background().WithName(name))
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager %s: %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	return m, stop
}

func newNamespace(t testing.TB) string {
	t.Helper()
	return testenv.Shared(t).NewNamespace(t, "kos-")
}

func newSubnet(ns, name, cidr string, vni uint32) *v1alpha1.Subnet {
	return &v1alpha1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.SubnetSpec{IPv4: cidr, VNI: vni},
	}
}

func newAttachment(ns, name, subnet string) *v1alpha1.NetworkAttachment {
	return &v1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.NetworkAttachmentSpec{Node: "node-1", Subnet: subnet},
	}
}

func createSubnet(t testing.TB, c versioned.Interface, s *v1alpha1.Subnet) *v1alpha1.Subnet {
	t.Helper()
	got, err := c.NetworkV1alpha1().Subnets(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating subnet %s/%s: %v", s.Namespace, s.Name, err)
	}
	return got
}

func createAttachment(t testing.TB, c versioned.Interface, a *v1alpha1.NetworkAttachment) *v1alpha1.NetworkAttachment {
	t.Helper()
	got, err := c.NetworkV1alpha1().NetworkAttachments(a.Namespace).Create(context.Background(), a, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating attachment %s/%s: %v", a.Namespace, a.Name, err)
	}
	return got
}

// waitValidated waits until the subnets are validated.
func waitValidated(t testing.TB, c versioned.Interface, subnets ...*v1alpha1.Subnet) {
	t.Helper()
	poll.Until(t, time.Minute, "subnets validated", func(ctx context.Context) error {
		for _, s := range subnets {
			got, err := c.NetworkV1alpha1().Subnets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !got.Status.Validated {
				return fmt.Errorf("subnet %s/%s not validated: %q", s.Namespace, s.Name, got.Status.Errors)
			}
		}
		return nil
	})
}

// snapshot is the KOS objects of some namespaces at one moment.
type snapshot struct {
	subnets     []v1alpha1.Subnet
	attachments []v1alpha1.NetworkAttachment
	locks       []v1alpha1.IPLock
}

func takeSnapshot(ctx context.Context, c versioned.Interface, namespaces ...string) (*snapshot, error) {
	var s snapshot
	for _, ns := range namespaces {
		subnets, err := c.NetworkV1alpha1().Subnets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		atts, err := c.NetworkV1alpha1().NetworkAttachments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		locks, err := c.NetworkV1alpha1().IPLocks(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		s.subnets = append(s.subnets, subnets.Items...)
		s.attachments = append(s.attachments, atts.Items...)
		s.locks = append(s.locks, locks.Items...)
	}
	return &s, nil
}

// uniqueAddresses returns an error naming the first address held by two
// attachments of one VNI.
func (s *snapshot) uniqueAddresses() error {
	holders := map[string]string{}
	for _, a := range s.attachments {
		if a.Status.IPv4 == "" {
			continue
		}
		k := fmt.Sprintf("%d/%s", a.Status.AddressVNI, a.Status.IPv4)
		if other, ok := holders[k]; ok {
			return fmt.Errorf("address %s of VNI %d held by %s and %s/%s", a.Status.IPv4, a.Status.AddressVNI, other, a.Namespace, a.Name)
		}
		holders[k] = a.Namespace + "/" + a.Name
	}
	return nil
}

// noConflictingValidated returns an error naming two validated subnets that
// conflict.
func (s *snapshot) noConflictingValidated() error {
	for i, a := range s.subnets {
		for _, b := range s.subnets[i+1:] {
			if !a.Status.Validated || !b.Status.Validated || a.Spec.VNI != b.Spec.VNI {
				continue
			}
			pa, pb := netip.MustParsePrefix(a.Spec.IPv4), netip.MustParsePrefix(b.Spec.IPv4)
			if a.Namespace != b.Namespace || pa.Overlaps(pb) {
				return fmt.Errorf("validated subnets %s/%s (%s) and %s/%s (%s) conflict on VNI %d", a.Namespace, a.Name, a.Spec.IPv4, b.Namespace, b.Name, b.Spec.IPv4, a.Spec.VNI)
			}
		}
	}
	return nil
}

// hasRivals reports whether two subnets conflict, validated or not.
func (s *snapshot) hasRivals() bool {
	for i, a := range s.subnets {
		for _, b := range s.subnets[i+1:] {
			if a.Spec.VNI == b.Spec.VNI && (a.Namespace != b.Namespace || netip.MustParsePrefix(a.Spec.IPv4).Overlaps(netip.MustParsePrefix(b.Spec.IPv4))) {
				return true
			}
		}
	}
	return false
}

// addressesSettled returns an error unless every attachment of a validated
// subnet holds an address of that subnet backed by its own lock, or is
// reported out of addresses in a subnet that is indeed full; unless every
// attachment of a missing or unvalidated subnet has none; and unless every
// lock is held by an existing attachment's status. An attachment whose
// subnet went after it got its address (kos-apiserver refuses to delete a
// subnet in use, but an attachment created during the deletion slips past)
// keeps the address and its lock, with the reason in errors.ipam.
func (s *snapshot) addressesSettled() error {
	subnets := map[string]*v1alpha1.Subnet{}
	for i := range s.subnets {
		subnets[s.subnets[i].Namespace+"/"+s.subnets[i].Name] = &s.subnets[i]
	}
	locks := map[string]*v1alpha1.IPLock{}
	for i := range s.locks {
		locks[s.locks[i].Namespace+"/"+s.locks[i].Name] = &s.locks[i]
	}
	used := map[string]bool{}
	held := map[string]int{}
	lockOf := func(a *v1alpha1.NetworkAttachment, addr netip.Addr) error {
		key := a.Namespace + "/" + a.Name
		lockKey := a.Namespace + "/" + ipam.LockName(a.Status.AddressVNI, addr)
		l := locks[lockKey]
		if l == nil || string(l.UID) != a.Status.LockUID {
			return fmt.Errorf("attachment %s has %s without its lock %s (UID %s)", key, addr, lockKey, a.Status.LockUID)
		}
		if ref := metav1.GetControllerOf(l); ref == nil || ref.UID != a.UID {
			return fmt.Errorf("lock %s of attachment %s is controlled by %v", lockKey, key, ref)
		}
		used[lockKey] = true
		return nil
	}
	for _, a := range s.attachments {
		key := a.Namespace + "/" + a.Name
		sub := subnets[a.Namespace+"/"+a.Spec.Subnet]
		if a.Status.IPv4 != "" && len(a.Status.Errors.IPAM) > 0 {
			// Kept, and the status says why.
			addr, err := netip.ParseAddr(a.Status.IPv4)
			if err != nil {
				return fmt.Errorf("attachment %s: %w", key, err)
			}
			if err := lockOf(&a, addr); err != nil {
				return err
			}
			continue
		}
		if sub == nil || !sub.Status.Validated {
			if a.Status.IPv4 != "" {
				return fmt.Errorf("attachment %s has address %s but its subnet %s is missing or not validated", key, a.Status.IPv4, a.Spec.Subnet)
			}
			continue
		}
		if a.Status.IPv4 == "" {
			if a.Status.AddressContention {
				continue // checked below, once the held addresses are counted
			}
			return fmt.Errorf("attachment %s of validated subnet %s has no address (errors %q)", key, a.Spec.Subnet, a.Status.Errors.IPAM)
		}
		addr, err := netip.ParseAddr(a.Status.IPv4)
		if err != nil {
			return fmt.Errorf("attachment %s: %w", key, err)
		}
		block := netip.MustParsePrefix(sub.Spec.IPv4)
		if !block.Contains(addr) || a.Status.AddressVNI != sub.Spec.VNI {
			return fmt.Errorf("attachment %s has %s on VNI %d, outside subnet %s (%s on VNI %d)", key, addr, a.Status.AddressVNI, sub.Name, sub.Spec.IPv4, sub.Spec.VNI)
		}
		if block.Bits() <= 29 && (addr == block.Addr() || addr == block.Addr().Next() || addr == lastAddr(block)) {
			return fmt.Errorf("attachment %s has %s, which %s never gives out", key, addr, block)
		}
		if err := lockOf(&a, addr); err != nil {
			return err
		}
		held[a.Namespace+"/"+a.Spec.Subnet]++
	}
	for _, a := range s.attachments {
		sub := subnets[a.Namespace+"/"+a.Spec.Subnet]
		if sub == nil || !sub.Status.Validated || a.Status.IPv4 != "" {
			continue
		}
		if n, size := held[a.Namespace+"/"+a.Spec.Subnet], assignable(sub.Spec.IPv4); n < size {
			return fmt.Errorf("attachment %s reports contention but subnet %s holds %d of %d addresses", a.Namespace+"/"+a.Name, sub.Name, n, size)
		}
	}
	var orphans []string
	for k := range locks {
		if !used[k] {
			orphans = append(orphans, k)
		}
	}
	if len(orphans) > 0 {
		return fmt.Errorf("%d locks held by no attachment, such as %s", len(orphans), strings.Join(orphans[:min(3, len(orphans))], ", "))
	}
	return nil
}

func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	n := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) | host
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// assignable returns how many addresses IPAM gives out in a block.
func assignable(cidr string) int {
	size := 1 << (32 - netip.MustParsePrefix(cidr).Bits())
	if size >= 5 {
		return size - 3
	}
	return size
}
