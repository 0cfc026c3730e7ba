// Package monitoring holds the tests of the kos-monitoring addon
// (addons/kos-monitoring): its dashboards are the files in
// addons/kos-monitoring/dashboards, each with a data source and a node
// variable, and its alerts the file addons/kos-monitoring/rules, in both
// variants (the bundled Prometheus and Grafana, and the PodMonitors and
// PrometheusRule of the Prometheus Operator variant, dry-run here against
// a real kube-apiserver); its Prometheus scrapes every KOS component, and
// every query of every dashboard panel returns data from real components
// under the load of kos-driver, as scraped by a real Prometheus with the
// addon's own configuration (its pod discovery replaced by static targets
// that carry the same pod labels, kos-apiserver's certificate verified) and
// rules; every alert fires on its fault's series (promtool test rules) and
// one on a real fault (kos-pki without its RBAC); and every KOS metric
// appears in docs/metrics.md.
package monitoring
