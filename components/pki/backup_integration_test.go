package pki_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/kos-sdn/kos/components/etcdbackup/backupmetrics"
	"github.com/kos-sdn/kos/components/pki"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationBackupMetrics runs kos-pki run with --etcd-backup-cronjob
// against a real kube-apiserver, as a ServiceAccount with no more rights
// than pki.Rules and backupmetrics.Rules grant (the rules of the
// manifests' Roles), writes a backup CronJob's status and its Jobs' as the
// CronJob and Job controllers would, and checks that /metrics follows: a
// completed Job, then a failed one, then one still waiting.
func TestIntegrationBackupMetrics(t *testing.T) {
	env := testenv.Shared(t)
	ns := newNamespace(t)
	client := kubeClient(t, env.RESTConfig)
	ctx := t.Context()

	secretRules, _, err := pki.Rules(pki.SetAll, "")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := serviceAccountKubeconfig(t, ns, "kos-pki", append(secretRules, backupmetrics.Rules()...))
	addr := fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])
	startRun(t, "--kubeconfig", kubeconfig, "--namespace", ns, "--secrets", "all",
		"--metrics-bind-address", addr, "--etcd-backup-cronjob", "kos-etcd-backup")

	// Suspended, so that kube-controller-manager (if the environment runs
	// one) starts no Job of its own.
	cj, err := client.BatchV1().CronJobs(ns).Create(ctx, &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "kos-etcd-backup"},
		Spec: batchv1.CronJobSpec{
			Schedule:    "17 */6 * * *",
			Suspend:     ptr.To(true),
			JobTemplate: batchv1.JobTemplateSpec{Spec: backupJobSpec()},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitMetrics(t, addr, []string{
		`kos_etcd_backup_cronjob_created_timestamp_seconds{cronjob="kos-etcd-backup"} ` + seconds(cj.CreationTimestamp.Time),
		`kos_etcd_backup_schedule_interval_seconds{cronjob="kos-etcd-backup"} 21600`,
		`kos_etcd_backup_suspended{cronjob="kos-etcd-backup"} 1`,
	}, []string{"kos_etcd_backup_last_success_timestamp_seconds", "kos_etcd_backup_last_job_failed"})

	// The first backup completes; the CronJob controller records it.
	start := time.Now().Add(-time.Minute).Truncate(time.Second)
	finishJob(t, ctx, cj, "kos-etcd-backup-1", start, batchv1.JobComplete)
	cj.Status.LastSuccessfulTime = ptr.To(metav1.NewTime(start.Add(30 * time.Second)))
	if cj, err = client.BatchV1().CronJobs(ns).UpdateStatus(ctx, cj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMetrics(t, addr, []string{
		// The Job's completion (start + 20 s) is older than the status.
		`kos_etcd_backup_last_success_timestamp_seconds{cronjob="kos-etcd-backup"} ` + seconds(start.Add(30*time.Second)),
		`kos_etcd_backup_last_job_failed{cronjob="kos-etcd-backup",job_name="kos-etcd-backup-1"} 0`,
	}, nil)

	// The next fails (its pod never scheduled, past activeDeadlineSeconds);
	// the one after waits.
	finishJob(t, ctx, cj, "kos-etcd-backup-2", start.Add(time.Second), batchv1.JobFailed)
	waiting := finishJob(t, ctx, cj, "kos-etcd-backup-3", start.Add(2*time.Second), "")
	waitMetrics(t, addr, []string{
		`kos_etcd_backup_last_success_timestamp_seconds{cronjob="kos-etcd-backup"} ` + seconds(start.Add(30*time.Second)),
		`kos_etcd_backup_last_job_failed{cronjob="kos-etcd-backup",job_name="kos-etcd-backup-2"} 1`,
		`kos_etcd_backup_active_job_start_timestamp_seconds{cronjob="kos-etcd-backup",job_name="kos-etcd-backup-3"} ` + seconds(waiting.Status.StartTime.Time),
	}, nil)
}

// serviceAccountKubeconfig grants the ServiceAccount ns/name rules in a Role
// of ns and returns a kubeconfig that acts as it (the environment's admin,
// impersonating).
func serviceAccountKubeconfig(t *testing.T, ns, name string, rules []rbacv1.PolicyRule) string {
	t.Helper()
	env := testenv.Shared(t)
	ctx := context.Background()
	rbac := kubeClient(t, env.RESTConfig).RbacV1()
	if _, err := rbac.Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = serviceaccount.MakeUsername(ns, name)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func backupJobSpec() batchv1.JobSpec {
	return batchv1.JobSpec{
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "backup", Image: "kos.example.com/kos-apiserver"}},
		}},
	}
}

// finishJob creates a Job owned by cj, managed by no controller of the
// environment, and writes the status a Job controller would: started at
// start, then finished 20 s later with cond (JobComplete or JobFailed), or
// still running when cond is empty.
func finishJob(t *testing.T, ctx context.Context, cj *batchv1.CronJob, name string, start time.Time, cond batchv1.JobConditionType) *batchv1.Job {
	t.Helper()
	jobs := kubeClient(t, testenv.Shared(t).RESTConfig).BatchV1().Jobs(cj.Namespace)
	spec := backupJobSpec()
	spec.ManagedBy = ptr.To("kos.example.com/test")
	j, err := jobs.Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "batch/v1", Kind: "CronJob", Name: cj.Name, UID: cj.UID, Controller: ptr.To(true),
		}}},
		Spec: spec,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	started, ended := metav1.NewTime(start), metav1.NewTime(start.Add(20*time.Second))
	j.Status.StartTime = &started
	switch cond {
	case batchv1.JobComplete:
		j.Status.Succeeded = 1
		j.Status.CompletionTime = &ended
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: ended},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: ended},
		}
	case batchv1.JobFailed:
		j.Status.Failed = 1
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonDeadlineExceeded, LastTransitionTime: ended},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonDeadlineExceeded, LastTransitionTime: ended},
		}
	default:
		j.Status.Active = 1
	}
	j, err = jobs.UpdateStatus(ctx, j, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("writing the status of job %s: %v", name, err)
	}
	return j
}

func seconds(t time.Time) string {
	return fmt.Sprintf("%g", float64(t.UnixNano())/1e9)
}

// waitMetrics scrapes addr until its exposition has every line of want and
// no series of a metric in absent, for at most 30 s.
func waitMetrics(t *testing.T, addr string, want, absent []string) {
	t.Helper()
	var body string
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
		}
		missing := 0
		for _, w := range want {
			if !strings.Contains(body, "\n"+w+"\n") {
				missing++
			}
		}
		for _, a := range absent {
			if strings.Contains(body, "\n"+a+"{") {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			var got []string
			for _, l := range strings.Split(body, "\n") {
				if strings.HasPrefix(l, "kos_etcd_backup_") {
					got = append(got, l)
				}
			}
			t.Fatalf("after 30 s /metrics has\n%s\nwant\n%s\nand none of %q", strings.Join(got, "\n"), strings.Join(want, "\n"), absent)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
