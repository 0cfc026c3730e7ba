// Package backupmetrics provides the metrics of the etcd backup CronJob
// (kos-etcd-backup): when a backup last succeeded, how often the schedule
// runs, whether the newest finished Job failed and since when a Job has been
// running or waiting. A backup Job's pod lives for a minute and cannot be
// scraped, so a long-running component of the same namespace (kos-pki)
// reads the CronJob and its Jobs from informers and exports these figures
// at each scrape.
package backupmetrics

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// The metrics, each labelled with the CronJob's name (cronjob); the
// namespace is the scraped pod's own, which Prometheus adds.
var (
	lastSuccessDesc = prometheus.NewDesc("kos_etcd_backup_last_success_timestamp_seconds",
		"When the newest backup Job of the CronJob completed, in seconds since the epoch; absent while none has.",
		[]string{"cronjob"}, nil)
	createdDesc = prometheus.NewDesc("kos_etcd_backup_cronjob_created_timestamp_seconds",
		"When the backup CronJob was created, in seconds since the epoch: the age a backup would have had, before the first one.",
		[]string{"cronjob"}, nil)
	intervalDesc = prometheus.NewDesc("kos_etcd_backup_schedule_interval_seconds",
		"The longest time between two runs of the backup CronJob's schedule, in seconds.",
		[]string{"cronjob"}, nil)
	suspendedDesc = prometheus.NewDesc("kos_etcd_backup_suspended",
		"1 when the backup CronJob is suspended (it starts no Job), else 0.",
		[]string{"cronjob"}, nil)
	lastFailedDesc = prometheus.NewDesc("kos_etcd_backup_last_job_failed",
		"1 when the newest finished Job of the backup CronJob failed, 0 when it completed; absent while none has finished.",
		[]string{"cronjob", "job_name"}, nil)
	activeStartDesc = prometheus.NewDesc("kos_etcd_backup_active_job_start_timestamp_seconds",
		"When the oldest unfinished Job of the backup CronJob started (its pod running or waiting to be scheduled), in seconds since the epoch; absent while none runs.",
		[]string{"cronjob", "job_name"}, nil)
)

// Rules returns the RBAC the collector needs in the CronJob's namespace, the
// rules of a Role there: reading CronJobs and Jobs, nothing else.
func Rules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{
		APIGroups: []string{batchv1.GroupName},
		Resources: []string{"cronjobs", "jobs"},
		Verbs:     []string{"get", "list", "watch"},
	}}
}

// Collector exports the metrics of one backup CronJob from the listers of
// an informer factory of its namespace. It reads the caches at each scrape
// and exports nothing until they have synced, or while the CronJob does not
// exist (a release without backups, or kos-etcd not installed).
type Collector struct {
	namespace, name string
	cronJobs        batchlisters.CronJobLister
	jobs            batchlisters.JobLister
	synced          []cache.InformerSynced

	// mu guards intervals, which remembers each schedule's interval: it
	// is computed once per schedule, not at every scrape.
	mu        sync.Mutex
	intervals map[string]intervalResult
}

type intervalResult struct {
	d   time.Duration
	err error
}

// NewCollector returns the collector of the CronJob namespace/name and
// registers its informers in factory, which must watch namespace (or every
// namespace); start factory afterwards.
func NewCollector(factory informers.SharedInformerFactory, namespace, name string) *Collector {
	cj := factory.Batch().V1().CronJobs()
	jobs := factory.Batch().V1().Jobs()
	return &Collector{
		namespace: namespace,
		name:      name,
		cronJobs:  cj.Lister(),
		jobs:      jobs.Lister(),
		synced:    []cache.InformerSynced{cj.Informer().HasSynced, jobs.Informer().HasSynced},
		intervals: map[string]intervalResult{},
	}
}

// Describe sends the descriptions of every metric the collector exports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{lastSuccessDesc, createdDesc, intervalDesc, suspendedDesc, lastFailedDesc, activeStartDesc} {
		ch <- d
	}
}

// Collect sends the metrics of the CronJob as the caches hold it now.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.synced {
		if !s() {
			return
		}
	}
	cj, err := c.cronJobs.CronJobs(c.namespace).Get(c.name)
	if err != nil {
		// A lister answers only NotFound; nothing to export then.
		return
	}
	jobs, err := c.jobs.Jobs(c.namespace).List(labels.Everything())
	if err != nil {
		return
	}
	interval, err := c.interval(cj)
	if err != nil {
		// Logged at every scrape: a schedule the CronJob controller
		// accepted but we cannot read is a bug to see, not to hide.
		klog.ErrorS(err, "Reading the schedule of the backup CronJob", "cronJob", klog.KObj(cj), "schedule", cj.Spec.Schedule)
	}
	for _, m := range Figures(cj, jobs, interval).metrics(c.name) {
		ch <- m
	}
}

// interval returns the interval of cj's schedule, computed once per
// schedule and time zone.
func (c *Collector) interval(cj *batchv1.CronJob) (time.Duration, error) {
	key := cj.Spec.Schedule
	if tz := cj.Spec.TimeZone; tz != nil {
		key = "CRON_TZ=" + *tz + " " + key
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.intervals[key]
	if !ok {
		r.d, r.err = ScheduleInterval(key, time.Now())
		c.intervals[key] = r
	}
	return r.d, r.err
}

// State is what the collector exports of a CronJob: each time is zero and
// each name empty when unknown, and then not exported.
type State struct {
	// LastSuccess is when the newest backup completed: the CronJob's
	// status.lastSuccessfulTime or the completion of a Job it owns,
	// whichever is later.
	LastSuccess time.Time
	// Created is when the CronJob was created.
	Created time.Time
	// Interval is the longest time between two runs of its schedule.
	Interval time.Duration
	// Suspended is the CronJob's spec.suspend.
	Suspended bool
	// LastFinishedJob is the newest Job it owns that completed or failed,
	// and LastFailed whether it failed.
	LastFinishedJob string
	LastFailed      bool
	// ActiveJob is the oldest Job it owns that has not finished, and
	// ActiveSince when it started (or was created, before it started).
	ActiveJob   string
	ActiveSince time.Time
}

// Figures reads the state of cj from it and the Jobs of its namespace
// (those cj does not own are ignored); interval is its schedule's.
func Figures(cj *batchv1.CronJob, jobs []*batchv1.Job, interval time.Duration) State {
	s := State{
		Created:   cj.CreationTimestamp.Time,
		Interval:  interval,
		Suspended: cj.Spec.Suspend != nil && *cj.Spec.Suspend,
	}
	if t := cj.Status.LastSuccessfulTime; t != nil {
		s.LastSuccess = t.Time
	}
	var lastFinished time.Time
	for _, j := range jobs {
		if !ownedBy(j, cj) {
			continue
		}
		finished, failed, at := finish(j)
		switch {
		case finished:
			if !failed && at.After(s.LastSuccess) {
				s.LastSuccess = at
			}
			// The newest by creation: a Job retried for an hour may
			// finish after a newer one.
			if created := j.CreationTimestamp.Time; s.LastFinishedJob == "" || created.After(lastFinished) ||
				(created.Equal(lastFinished) && j.Name > s.LastFinishedJob) {
				s.LastFinishedJob, s.LastFailed, lastFinished = j.Name, failed, created
			}
		default:
			since := j.CreationTimestamp.Time
			if j.Status.StartTime != nil {
				since = j.Status.StartTime.Time
			}
			if s.ActiveJob == "" || since.Before(s.ActiveSince) || (since.Equal(s.ActiveSince) && j.Name < s.ActiveJob) {
				s.ActiveJob, s.ActiveSince = j.Name, since
			}
		}
	}
	return s
}

// ownedBy says whether cj controls j: it made it, or kubectl create job
// --from=cronjob/... did on its behalf.
func ownedBy(j *batchv1.Job, cj *batchv1.CronJob) bool {
	for _, ref := range j.OwnerReferences {
		if ref.Kind == "CronJob" && ref.UID == cj.UID {
			return true
		}
	}
	return false
}

// finish says whether j has finished (its Complete or Failed condition is
// True), whether it failed, and when.
func finish(j *batchv1.Job) (finished, failed bool, at time.Time) {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			at = c.LastTransitionTime.Time
			if j.Status.CompletionTime != nil {
				at = j.Status.CompletionTime.Time
			}
			return true, false, at
		case batchv1.JobFailed:
			return true, true, c.LastTransitionTime.Time
		}
	}
	return false, false, time.Time{}
}

// metrics turns s into the metrics of the CronJob name.
func (s State) metrics(name string) []prometheus.Metric {
	seconds := func(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
	bit := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	ms := []prometheus.Metric{
		prometheus.MustNewConstMetric(createdDesc, prometheus.GaugeValue, seconds(s.Created), name),
		prometheus.MustNewConstMetric(suspendedDesc, prometheus.GaugeValue, bit(s.Suspended), name),
	}
	if s.Interval > 0 {
		ms = append(ms, prometheus.MustNewConstMetric(intervalDesc, prometheus.GaugeValue, s.Interval.Seconds(), name))
	}
	if !s.LastSuccess.IsZero() {
		ms = append(ms, prometheus.MustNewConstMetric(lastSuccessDesc, prometheus.GaugeValue, seconds(s.LastSuccess), name))
	}
	if s.LastFinishedJob != "" {
		ms = append(ms, prometheus.MustNewConstMetric(lastFailedDesc, prometheus.GaugeValue, bit(s.LastFailed), name, s.LastFinishedJob))
	}
	if s.ActiveJob != "" {
		ms = append(ms, prometheus.MustNewConstMetric(activeStartDesc, prometheus.GaugeValue, seconds(s.ActiveSince), name, s.ActiveJob))
	}
	return ms
}

// Bounds of ScheduleInterval's look ahead: a year of runs, at most
// maxRuns of them (a schedule of every minute repeats within a day).
const (
	horizon = 366 * 24 * time.Hour
	maxRuns = 1000
)

// ScheduleInterval returns the longest time between two consecutive runs
// of a cron schedule (five fields or a descriptor such as @daily, with an
// optional CRON_TZ= or TZ= prefix, as the CronJob controller reads them)
// over the year after from.
func ScheduleInterval(schedule string, from time.Time) (time.Duration, error) {
	sched, err := cron.ParseStandard(schedule)
	if err != nil {
		return 0, err
	}
	prev := sched.Next(from)
	if prev.IsZero() {
		return 0, errors.New("the schedule never runs")
	}
	var longest time.Duration
	for n := 0; n < maxRuns && (n < 1 || prev.Before(from.Add(horizon))); n++ {
		next := sched.Next(prev)
		if next.IsZero() {
			break
		}
		longest = max(longest, next.Sub(prev))
		prev = next
	}
	if longest == 0 {
		return 0, errors.New("the schedule runs only once")
	}
	return longest, nil
}
