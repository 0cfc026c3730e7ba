// Package monitoring holds the tests of the kos-monitoring addon
// (addons/kos-monitoring): its dashboards are the files in
// addons/kos-monitoring/dashboards, its Prometheus scrapes every KOS
// component, and every query of every dashboard panel returns data from
// real components under the load of kos-driver, as scraped by a real
// Prometheus with the addon's own configuration (its pod discovery replaced
// by static targets that carry the same pod labels); and every KOS metric
// appears in docs/metrics.md.
package monitoring
