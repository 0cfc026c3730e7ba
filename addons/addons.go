// Package addons holds the KOS addon bundle as data: the source every
// release from 0.4.0 is rendered from (source/, kustomize bases and
// overlays), the alerts and dashboards kos-monitoring carries, and each
// addon folder's index (addon.yaml), embedded so that kos-release renders a
// release wherever it runs. The released manifests are not embedded: they
// are published as they are.
package addons

import "embed"

// FS is the addons folder of the repository, as far as rendering needs it:
// source/, kos-monitoring/rules, kos-monitoring/dashboards and every
// */addon.yaml, at the same paths.
//
//go:embed source kos-monitoring/rules kos-monitoring/dashboards */addon.yaml kos-monitoring/prometheus-operator/channel.yaml
var FS embed.FS
