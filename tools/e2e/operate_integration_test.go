package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// What the operations test uses besides the standard test's names.
const (
	// backupBucket and backupPrefix are where the backups go: the names
	// docs/backup.md's commands use, so that they run as written.
	backupBucket = "kos-backups"
	backupPrefix = "cluster-a/"
	// backupVolume is the local volume the backup claim binds to.
	backupVolume = "local-backups"
	// doomedNamespace, with a Subnet, and emptyNamespace, with nothing,
	// are deleted while the KOS API is down.
	doomedNamespace = "e2e-operate-doomed"
	emptyNamespace  = "e2e-operate-empty"
	// agentLivenessWindow is how long the agent's liveness probe lets a
	// failing agent run (addons/kos-agent/0.3.0.yaml: every 10 s, 3
	// failures).
	agentLivenessWindow = 30 * time.Second
)

// operate is the operations test's state.
type operate struct {
	*standard
	// channels are the installed release's channels.
	channels []string
	// hostsBefore is each node's hostState before the install, by name.
	hostsBefore map[string]string
}

// testNetwork makes subnet blue with an attachment on every node, each
// given to a guest, and checks they ping each other.
func (o *operate) testNetwork(t *testing.T) {
	ctx := t.Context()
	if _, err := o.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: standardNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const cidr = "10.253.0.0/24"
	subnet := &networkv1alpha1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Name: "blue"},
		Spec:       networkv1alpha1.SubnetSpec{IPv4: cidr, VNI: 4301},
	}
	if _, err := o.network.NetworkV1alpha1().Subnets(standardNamespace).Create(ctx, subnet, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o.subnets["blue"] = netip.MustParsePrefix(cidr)
	for i, n := range o.env.Nodes {
		o.plumb(t, o.attach(t, fmt.Sprintf("blue-%d", i+1), "blue", n.Name))
	}
	checkPings(t, o.guestsOf("blue"), 3, 1, time.Minute)
}

// testBackupRestore backs the KOS API's data up to S3 with a Job of the
// CronJob, loses the etcd volumes, and restores them by running the shell
// blocks of docs/backup.md's "Restoring" as they are written. Every
// object comes back as it was and the guests still ping.
func (o *operate) testBackupRestore(t *testing.T) {
	ctx := t.Context()
	began := time.Now()
	// An S3 server the pods reach, and the Secret the CronJob reads.
	srv, err := testenv.StartS3At(o.t.Context(), o.t.TempDir(), o.env.Nodes[0].HostIP)
	if err != nil {
		t.Fatalf("starting the S3 server: %v", err)
	}
	o.t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			o.t.Errorf("stopping the S3 server: %v", err)
		}
	})
	if err := srv.CreateBucket(ctx, backupBucket); err != nil {
		t.Fatal(err)
	}
	endpoint := srv.Endpoint
	o.kubectl(t, "-n", kosinstall.Namespace, "create", "secret", "generic", "kos-etcd-backup-s3",
		"--from-literal=KOS_ETCD_BACKUP_S3=s3://"+backupBucket+"/"+backupPrefix,
		"--from-literal=AWS_REGION="+srv.Region,
		"--from-literal=AWS_ACCESS_KEY_ID="+srv.AccessKey,
		"--from-literal=AWS_SECRET_ACCESS_KEY="+srv.SecretKey,
		"--from-literal=S3_ENDPOINT="+endpoint)
	o.provideBackupVolume(t, backupVolume, resource.MustParse("8Gi"))

	before := o.objects(t, "")
	if len(before) < 7 {
		t.Fatalf("only %d KOS objects before the backup: %v", len(before), before)
	}
	// The backup, as docs/backup.md takes one by hand.
	o.kubectl(t, "-n", kosinstall.Namespace, "create", "job", "--from=cronjob/kos-etcd-backup", "backup-now")
	o.kubectl(t, "-n", kosinstall.Namespace, "wait", "--for=condition=Complete", "job/backup-now", "--timeout=180s")
	logs := o.kubectl(t, "-n", kosinstall.Namespace, "logs", "job/backup-now")
	t.Logf("the backup's log:\n%s", logs)
	for _, want := range []string{"saved /var/lib/kos-etcd-backup/kos-etcd-", "uploaded s3://" + backupBucket + "/" + backupPrefix + "kos-etcd-"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("the backup's log does not say %q", want)
		}
	}
	figures.Duration(t, "operate-backup", time.Since(began))
	o.checkBackupMetrics(t, "backup-now")

	// The disaster: the etcd members' disks are lost. First everything
	// that writes stops, as the doc says.
	began = time.Now()
	doc := filepath.Join(o.root, "docs", "backup.md")
	o.runDoc(t, o.runbook(t, doc, "### 1. Stop everything that writes")...)
	for _, n := range o.env.Nodes {
		dir := filepath.Join(n.HostPath(kosinstall.VolumesDir), "local-"+n.Name)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	step2 := o.runbook(t, doc, "### 2. Give every member an empty volume where it will run")
	if len(step2) != 2 {
		t.Fatalf("docs/backup.md step 2 has %d blocks to run, want 2 (the claims deleted; the members started)", len(step2))
	}
	o.runDoc(t, step2[0])
	// The volumes are made by hand here: the doc says to make them again.
	for _, n := range o.env.Nodes {
		o.kubectl(t, "delete", "pv", "local-"+n.Name, "--timeout=60s")
	}
	o.provideVolumes(t)
	o.runDoc(t, step2[1])
	o.runDoc(t, o.runbook(t, doc, "### 3. Restore each member from the same snapshot")...)
	o.runDoc(t, o.runbook(t, doc, "### 4. Start again and check")...)
	figures.Duration(t, "operate-restore", time.Since(began))
	o.waitKOSReady(t, 3*time.Minute)
	figures.Duration(t, "operate-restore-to-ready", time.Since(began))

	if diff := cmp.Diff(o.objects(t, ""), before); diff != "" {
		t.Errorf("the KOS objects after the restore differ from those backed up (-got +want):\n%s", diff)
	}
	// As docs/backup.md says, channels apply of the installed release
	// changes nothing.
	if out := o.channelsCLI(t, append(append([]string{"apply", "channel"}, o.channels...), "--yes")...); !strings.Contains(out, "No update required") {
		t.Errorf("channels apply after the restore has something to do:\n%s", out)
	}
	checkPings(t, o.guestsOf("blue"), 3, 1, time.Minute)
}

// checkBackupMetrics reads kos-pki's metrics through the kube-apiserver's
// pod proxy (as kubectl kos status does) until they report job, which
// completed, as the newest backup Job to finish and not failed, and a last
// success no older than its completion.
func (o *operate) checkBackupMetrics(t *testing.T, job string) {
	ctx := t.Context()
	j, err := o.kube.BatchV1().Jobs(kosinstall.Namespace).Get(ctx, job, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j.Status.CompletionTime == nil {
		t.Fatalf("job %s has no completion time", job)
	}
	completed := j.Status.CompletionTime.Unix()
	pods, err := o.kube.CoreV1().Pods(kosinstall.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kos-pki"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("no kos-pki pod (%v)", err)
	}
	pod := pods.Items[0].Name
	failed := `kos_etcd_backup_last_job_failed{cronjob="kos-etcd-backup",job_name="` + job + `"} 0`
	poll.Until(t, time.Minute, "kos-pki to export the backup "+job, func(ctx context.Context) error {
		raw, err := o.kube.CoreV1().RESTClient().Get().Namespace(kosinstall.Namespace).
			Resource("pods").SubResource("proxy").Name(pod + ":9296").Suffix("metrics").DoRaw(ctx)
		if err != nil {
			return err
		}
		var last float64
		found := false
		for _, line := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, `kos_etcd_backup_last_success_timestamp_seconds{cronjob="kos-etcd-backup"} `); ok {
				if last, err = strconv.ParseFloat(v, 64); err != nil {
					return err
				}
			}
			found = found || line == failed
		}
		switch {
		case !found:
			return fmt.Errorf("kos-pki's metrics lack %s", failed)
		case int64(last) < completed:
			return fmt.Errorf("kos_etcd_backup_last_success_timestamp_seconds is %.0f, before the Job completed (%d)", last, completed)
		}
		return nil
	})
}

// provideBackupVolume gives the backup claim a local volume name of size
// on the first node, in the default StorageClass the etcd volumes are in.
func (o *operate) provideBackupVolume(t *testing.T, name string, size resource.Quantity) {
	n := o.env.Nodes[0]
	if err := os.MkdirAll(filepath.Join(n.HostPath(kosinstall.VolumesDir), name), 0o755); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              kosinstall.LocalStorageClass,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				Local: &corev1.LocalVolumeSource{Path: path.Join(kosinstall.VolumesDir, name)},
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{n.Name},
				}}}},
			}},
		},
	}
	if _, err := o.kube.CoreV1().PersistentVolumes().Create(t.Context(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// objects returns what must not change of every Subnet, NetworkAttachment
// and IPLock of namespace ("" for all), by kind/namespace/name.
func (o *operate) objects(t *testing.T, namespace string) map[string]string {
	t.Helper()
	ctx := t.Context()
	api := o.network.NetworkV1alpha1()
	out := map[string]string{}
	subnets, err := api.Subnets(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subnets.Items {
		out["Subnet/"+s.Namespace+"/"+s.Name] = fmt.Sprintf("uid %s, %s VNI %d", s.UID, s.Spec.IPv4, s.Spec.VNI)
	}
	atts, err := api.NetworkAttachments(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range atts.Items {
		st := a.Status
		out["NetworkAttachment/"+a.Namespace+"/"+a.Name] = fmt.Sprintf("uid %s, node %s, subnet %s, %s %s on %s at %s, lock %s",
			a.UID, a.Spec.Node, a.Spec.Subnet, st.IPv4, st.MACAddress, st.IfcName, st.HostIP, st.LockUID)
	}
	locks, err := api.IPLocks(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range locks.Items {
		owner := ""
		if ref := metav1.GetControllerOf(&l); ref != nil {
			owner = ref.Name + " " + string(ref.UID)
		}
		out["IPLock/"+l.Namespace+"/"+l.Name] = fmt.Sprintf("uid %s, subnet %s, owner %s", l.UID, l.Spec.SubnetName, owner)
	}
	return out
}

// testAgentStartsWithoutAPI stops kos-apiserver, deletes the agent pod of
// the second node and watches its new pod for longer than the liveness
// probe lets a failing agent run: it must not restart. Then kos-apiserver
// runs again, the agent becomes Ready, and its node's guests ping.
func (o *operate) testAgentStartsWithoutAPI(t *testing.T) {
	ctx := t.Context()
	node := o.env.Nodes[1].Name
	o.scaleAPIServer(t, 0)
	old := o.firstPod(t, kosinstall.AgentNamespace, "kos-agent", node)
	o.kubectl(t, "-n", kosinstall.AgentNamespace, "delete", "pod", old.Name, "--wait=false")

	// The new pod's agent starts while the API is away.
	var pod *corev1.Pod
	var started time.Time
	poll.Until(t, 2*time.Minute, "a new agent on node "+node+" running", func(ctx context.Context) error {
		p, err := o.agentPod(ctx, node)
		if err != nil {
			return err
		}
		if p.UID == old.UID {
			return errors.New("the old pod is still there")
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.Name == "kos-agent" && c.State.Running != nil {
				pod, started = p, c.State.Running.StartedAt.Time
				return nil
			}
		}
		return fmt.Errorf("pod %s: container kos-agent not running", p.Name)
	})
	// Beyond the liveness window, with a period's margin, the agent runs
	// on, not Ready, never restarted.
	hold := agentLivenessWindow + 15*time.Second
	for time.Since(started) < hold {
		p, err := o.kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.Name != "kos-agent" {
				continue
			}
			if c.RestartCount != 0 || c.State.Running == nil {
				t.Fatalf("agent pod %s, %s after its start with the KOS API away: restarts %d, state %+v, last %+v",
					p.Name, since(started), c.RestartCount, c.State, c.LastTerminationState)
			}
			if c.Ready {
				t.Errorf("agent pod %s is Ready with the KOS API away", p.Name)
			}
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("the agent ran %s with the KOS API away: not restarted, not Ready", since(started))
	figures.Duration(t, "operate-agent-running-without-api", time.Since(started))

	resumed := time.Now()
	o.scaleAPIServer(t, 2)
	figures.Duration(t, "operate-apiserver-ready-after-resume", time.Since(resumed))
	o.waitAgentBack(t, node, pod.CreationTimestamp.Time, 3*time.Minute)
	figures.Duration(t, "operate-agent-ready-after-resume", time.Since(resumed))
	p, err := o.agentPod(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	if n := containerRestarts(p, "kos-agent"); n != 0 {
		t.Errorf("agent pod %s restarted %d times", p.Name, n)
	}
	// The pod's Open vSwitch went with the old pod: the node's guests
	// get their new interfaces.
	for name, g := range o.guests {
		if g.Attachment.Spec.Node == node {
			o.plumb(t, name)
		}
	}
	checkPings(t, o.guestsOf("blue"), 3, 1, time.Minute)
	figures.Duration(t, "operate-agent-pinging-after-resume", time.Since(resumed))
}

// agentPod returns the agent pod of node.
func (o *operate) agentPod(ctx context.Context, node string) (*corev1.Pod, error) {
	pods, err := o.kube.CoreV1().Pods(kosinstall.AgentNamespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	for i, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			return &pods.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no agent pod on node %s", node)
}

// scaleAPIServer scales kos-apiserver to replicas and waits until that
// many of its pods run Ready (or none is left).
func (o *operate) scaleAPIServer(t *testing.T, replicas int) {
	t.Helper()
	o.kubectl(t, "-n", kosinstall.Namespace, "scale", "deploy", "kos-apiserver", fmt.Sprintf("--replicas=%d", replicas))
	poll.Until(t, 3*time.Minute, fmt.Sprintf("%d kos-apiserver pods Ready", replicas), func(ctx context.Context) error {
		pods, err := o.kube.CoreV1().Pods(kosinstall.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kos-apiserver"})
		if err != nil {
			return err
		}
		ready := 0
		for _, p := range pods.Items {
			if podReady(&p) && p.DeletionTimestamp == nil {
				ready++
			}
		}
		if ready != replicas || (replicas == 0 && len(pods.Items) > 0) {
			return fmt.Errorf("%d pods, %d Ready", len(pods.Items), ready)
		}
		return nil
	})
}

// testAPIDown stops kos-apiserver. The guests keep pinging; kubectl's
// discovery fails; a namespace's deletion stalls until the APIService is
// deleted, as docs/operations.md says. Then kos-apiserver runs again, a
// channels daemon that repairs drift makes the APIService again, and every
// object is back.
func (o *operate) testAPIDown(t *testing.T) {
	ctx := t.Context()
	doomed := []string{doomedNamespace, emptyNamespace}
	for _, ns := range doomed {
		if _, err := o.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	orphan := &networkv1alpha1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Name: "orphan"},
		Spec:       networkv1alpha1.SubnetSpec{IPv4: "10.254.0.0/24", VNI: 4303},
	}
	if _, err := o.network.NetworkV1alpha1().Subnets(doomedNamespace).Create(ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := o.objects(t, standardNamespace)

	down := time.Now()
	o.scaleAPIServer(t, 0)
	poll.Until(t, time.Minute, "APIService "+kosinstall.APIService+" not Available", func(ctx context.Context) error {
		return o.apiServiceUnavailable(ctx)
	})
	// The data plane forwards on.
	checkPings(t, o.guestsOf("blue"), 3, 1, 30*time.Second)
	// kubectl's discovery leaves the group out.
	if out, err := o.kubectlErr(ctx, "api-resources"); err != nil || strings.Contains(out, "network.example.com") {
		t.Errorf("kubectl api-resources with kos-apiserver down: %v; want the KOS kinds left out:\n%s", err, out)
	}
	if out, err := o.kubectlErr(ctx, "get", "subnets", "-A"); err == nil {
		t.Errorf("kubectl get subnets succeeds with kos-apiserver down:\n%s", out)
	} else {
		t.Logf("with kos-apiserver down: %v", err)
	}

	// Namespace deletions stall: the namespace controller cannot
	// discover the group.
	deleted := time.Now()
	for _, ns := range doomed {
		o.kubectl(t, "delete", "namespace", ns, "--wait=false")
	}
	for _, name := range doomed {
		var cond corev1.NamespaceCondition
		poll.Until(t, 2*time.Minute, "namespace "+name+" to report its discovery failure", func(ctx context.Context) error {
			ns, err := o.kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range ns.Status.Conditions {
				if c.Type == corev1.NamespaceDeletionDiscoveryFailure && c.Status == corev1.ConditionTrue {
					cond = c
					return nil
				}
			}
			return fmt.Errorf("phase %s, conditions %+v", ns.Status.Phase, ns.Status.Conditions)
		})
		t.Logf("namespace %s stalls: %s: %s", name, cond.Reason, cond.Message)
	}
	time.Sleep(5 * time.Second)
	for _, name := range doomed {
		if _, err := o.kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("namespace %s %s after its deletion: %v, want it stalled", name, since(deleted), err)
		}
	}
	figures.Duration(t, "operate-namespace-stalled", time.Since(deleted))

	// The emergency step.
	emergency := time.Now()
	o.kubectl(t, "delete", "apiservice", kosinstall.APIService)
	for _, name := range doomed {
		poll.Until(t, 3*time.Minute, "namespace "+name+" gone", func(ctx context.Context) error {
			_, err := o.kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there (%v)", err)
		})
	}
	figures.Duration(t, "operate-namespaces-gone-after-apiservice-deleted", time.Since(emergency))
	out, err := o.kubectlErr(ctx, "get", "subnets", "-A")
	t.Logf("without the APIService: %v\n%s", err, out)
	checkPings(t, o.guestsOf("blue"), 3, 1, 30*time.Second)

	// The way back: kos-apiserver runs again (the cause fixed), and the
	// APIService is made again.
	back := time.Now()
	o.scaleAPIServer(t, 2)
	// As docs/operations.md says, channels apply of the installed
	// release does not make the APIService again; one pass that repairs
	// drift does.
	out = o.channelsCLI(t, append(append([]string{"apply", "channel"}, o.channels...), "--yes")...)
	_, err = o.agg.ApiregistrationV1().APIServices().Get(ctx, kosinstall.APIService, metav1.GetOptions{})
	if !strings.Contains(out, "No update required") || !apierrors.IsNotFound(err) {
		t.Errorf("channels apply --yes with the APIService deleted: APIService %v; want No update required and none made:\n%s", err, out)
	}
	out = o.channelsCLI(t, append(append([]string{"apply", "channel"}, o.channels...), "--yes", "--drift=repair")...)
	if !strings.Contains(out, "objects repaired") || strings.Contains(out, " 0 objects repaired") {
		t.Errorf("channels apply --yes --drift=repair with the APIService deleted repaired nothing:\n%s", out)
	}
	poll.Until(t, 3*time.Minute, "KOS ready again", func(ctx context.Context) error {
		return kosinstall.Ready(ctx, o.kube, o.agg)
	})
	figures.Duration(t, "operate-api-back", time.Since(back))
	figures.Duration(t, "operate-api-down-whole", time.Since(down))

	if diff := cmp.Diff(o.objects(t, standardNamespace), before); diff != "" {
		t.Errorf("the KOS objects after the API came back differ (-got +want):\n%s", diff)
	}
	// What the deleted namespace held is still in the KOS API, and goes
	// as docs/operations.md says.
	left := o.objects(t, doomedNamespace)
	if len(left) != 1 {
		t.Errorf("KOS objects of the namespace %s deleted without the APIService: %v, want its Subnet left", doomedNamespace, left)
	}
	o.kubectl(t, "-n", doomedNamespace, "delete", "networkattachments,subnets", "--all")
	if left := o.objects(t, doomedNamespace); len(left) != 0 {
		t.Errorf("KOS objects of the deleted namespace %s after deleting them: %v", doomedNamespace, left)
	}
	checkPings(t, o.guestsOf("blue"), 3, 1, 30*time.Second)
}

// apiServiceUnavailable returns nil once the KOS APIService is not
// Available.
func (o *operate) apiServiceUnavailable(ctx context.Context) error {
	svc, err := o.agg.ApiregistrationV1().APIServices().Get(ctx, kosinstall.APIService, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range svc.Status.Conditions {
		if c.Type == apiregistrationv1.Available && c.Status == apiregistrationv1.ConditionTrue {
			return errors.New("still Available")
		}
	}
	return nil
}

// kubectlErr runs the machine's kubectl with the admin kubeconfig and
// returns its output, and its error with its standard error.
func (o *operate) kubectlErr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", o.env.Kubeconfig}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// testUninstall uninstalls KOS as docs/install.md's "Uninstalling" says,
// running its blocks as written (docrun): the attachments deleted while the
// agents run, the addons deleted, every node cleaned up by
// docs/examples/kos-node-cleanup.yaml with the release's kos-agent image
// (the page's KOS_AGENT_IMAGE), and the clean-up's objects deleted. Every node's host
// state is then what it was before the install.
func (o *operate) testUninstall(t *testing.T) {
	ctx := t.Context()
	began := time.Now()
	// The check sees what KOS did to each node.
	for _, n := range o.env.Nodes {
		if during := hostState(t, n); during == o.hostsBefore[n.Name] {
			t.Errorf("node %s with KOS installed is as before the install:\n%s", n.Name, during)
		}
	}
	ds, err := o.kube.AppsV1().DaemonSets(kosinstall.AgentNamespace).Get(ctx, "kos-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	image := ""
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "kos-agent" {
			image = c.Image
		}
	}
	o.kubectl(t, "delete", "networkattachments", "--all", "-n", standardNamespace, "--timeout=2m")
	o.kubectl(t, "delete", "namespace", standardNamespace, "--timeout=2m")

	// Steps 2 to 4 run as the page writes them, with the image the
	// release ran for the page's KOS_AGENT_IMAGE.
	page := filepath.Join(o.root, "docs", "install.md")
	blocks := o.runbook(t, page, "## Uninstalling")
	if len(blocks) != 3 {
		t.Fatalf("docs/install.md's Uninstalling has %d blocks to run, want 3 (the addons, the nodes, the clean-up's objects)", len(blocks))
	}
	o.runDoc(t, blocks[0])
	figures.Duration(t, "operate-addons-deleted", time.Since(began))
	// The page's sed replaces the example's image, whatever its version.
	example, err := os.ReadFile(filepath.Join(o.root, "docs", "examples", "kos-node-cleanup.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(example, []byte("image: kos.example.com/kos-agent:")) {
		t.Fatal("docs/examples/kos-node-cleanup.yaml names no kos.example.com/kos-agent image for the page's sed to replace")
	}
	o.runDocVars(t, map[string]string{"KOS_AGENT_IMAGE": image}, blocks[1])
	o.runDoc(t, blocks[2])
	figures.Duration(t, "operate-uninstall", time.Since(began))

	for _, n := range o.env.Nodes {
		if diff := cmp.Diff(hostState(t, n), o.hostsBefore[n.Name]); diff != "" {
			t.Errorf("node %s after the uninstall differs from before the install (-after +before):\n%s", n.Name, diff)
		}
	}
}

// hostPathsKOSUses are the node paths KOS writes to: the CNI plugin, the
// agent's sockets and run dirs, kos-ovs's database, and the node's Open
// vSwitch run dir the agent's pod mounts.
var hostPathsKOSUses = []string{"/opt/cni/bin/kos", "/var/run/kos", "/var/lib/kos", "/var/run/openvswitch"}

// hostState describes what of node n KOS may change: its network
// namespace's interfaces (but those of the cluster's own CNI, bridge cni0
// and its pods' veths, which come and go with pods) with their addresses,
// its IPv4 routes (but cni0's), and the files under hostPathsKOSUses (an
// empty folder counts as none).
func hostState(t *testing.T, n *cluster.Node) string {
	t.Helper()
	ctx := t.Context()
	var b strings.Builder
	node := &ovsenv.Netns{Name: n.Netns}
	links, err := node.Run(ctx, "ip", "-o", "link", "show")
	if err != nil {
		t.Fatal(err)
	}
	ofCNI := map[string]bool{}
	for line := range strings.SplitSeq(strings.TrimSpace(links), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if name == "cni0" || strings.Contains(line, " master cni0 ") {
			ofCNI[name] = true
			continue
		}
		fmt.Fprintf(&b, "link %s\n", name)
	}
	addrs, err := node.Run(ctx, "ip", "-o", "addr", "show")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(addrs), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || ofCNI[f[1]] || f[2] == "inet6" && strings.HasPrefix(f[3], "fe80:") {
			continue
		}
		fmt.Fprintf(&b, "address %s %s %s\n", f[1], f[2], f[3])
	}
	routes, err := node.Run(ctx, "ip", "-4", "route", "show")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(routes), "\n") {
		if !strings.Contains(line+" ", " dev cni0 ") {
			fmt.Fprintf(&b, "route %s\n", strings.TrimSpace(line))
		}
	}
	for _, p := range hostPathsKOSUses {
		root := n.HostPath(p)
		err := filepath.WalkDir(root, func(file string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				rel, _ := filepath.Rel(root, file)
				fmt.Fprintf(&b, "file %s\n", filepath.Join(p, rel))
			}
			return nil
		})
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	return b.String()
}
