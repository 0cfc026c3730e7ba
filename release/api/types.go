// Package api holds the wire types of an operator's release configuration
// (kind ReleaseConfig, kos.example.com/v1alpha1): what kos-release changes
// in the manifests it renders. Decode reads one strictly: an unknown key, a
// duplicate key or a bad value is refused with the key's path.
package api

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// APIVersion and Kind name a release configuration file.
const (
	APIVersion = "kos.example.com/v1alpha1"
	Kind       = "ReleaseConfig"
)

// ReleaseConfig is an operator's configuration of a KOS release. Every
// field is optional; what is left out keeps the manifests' defaults
// (docs/install.md lists them).
type ReleaseConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`

	// Registry replaces kos.example.com in the names of the KOS images,
	// "HOST[:PORT][/PREFIX]" as the images were pushed.
	Registry string `json:"registry,omitempty"`
	// Images replace single images, by the name the manifests give them
	// without a tag (kos.example.com/kos-agent, quay.io/prometheus/prometheus,
	// ...), with a full reference: NAME[:TAG][@sha256:DIGEST]. An image
	// named here is not renamed by Registry.
	Images map[string]string `json:"images,omitempty"`
	// ImagePullSecrets name Secrets every KOS pod pulls its images with;
	// each must exist in the namespace of the pod (example-com, kos-node,
	// kos-monitoring).
	ImagePullSecrets []string `json:"imagePullSecrets,omitempty"`
	// Components change where and how each component's pods run, by the
	// component's name (Components lists them).
	Components map[string]Component `json:"components,omitempty"`
	// Etcd sizes the KOS API's etcd and its backups.
	Etcd Etcd `json:"etcd,omitempty"`
	// CNI says where the node's CNI plugins are.
	CNI CNI `json:"cni,omitempty"`
	// Monitoring configures the addon kos-monitoring.
	Monitoring Monitoring `json:"monitoring,omitempty"`
	// Patches are applied last, to every rendered object they match: a
	// strategic merge patch or a JSON 6902 patch, as kustomize's patches.
	Patches []Patch `json:"patches,omitempty"`
}

// Component is where and how one component's pods run. A field left out
// keeps the manifest's value.
type Component struct {
	// Replicas of the component's Deployment (kos-apiserver and
	// kos-controller-manager only).
	Replicas *int32 `json:"replicas,omitempty"`
	// NodeSelector replaces the pods' node selector.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations replace the pods' tolerations.
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// PriorityClassName replaces the pods' priority class.
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// Resources are merged into the requests and limits of the pods'
	// containers, by container name.
	Resources map[string]corev1.ResourceRequirements `json:"resources,omitempty"`
}

// Etcd sizes kos-etcd.
type Etcd struct {
	// Storage is each member's data volume. Choose it before the first
	// install: a StatefulSet's volumes cannot change.
	Storage Volume `json:"storage,omitempty"`
	// Backup is the backup CronJob and its volume.
	Backup Backup `json:"backup,omitempty"`
}

// Volume is a PersistentVolumeClaim's size and class.
type Volume struct {
	// Size of the volume; etcd's space quota follows the data volume's.
	Size *resource.Quantity `json:"size,omitempty"`
	// StorageClassName of the volume; empty means the cluster's default.
	StorageClassName string `json:"storageClassName,omitempty"`
}

// Backup is kos-etcd's backup CronJob.
type Backup struct {
	// Volume is the backup claim's; without a StorageClassName it takes
	// the members' (Etcd.Storage's), then the cluster's default.
	Volume `json:",inline"`
	// Schedule of the CronJob, in cron's five fields.
	Schedule string `json:"schedule,omitempty"`
	// Keep is how many snapshots the volume keeps.
	Keep *int32 `json:"keep,omitempty"`
}

// CNI is where the node's CNI plugins are.
type CNI struct {
	// BinDir is the node's folder of CNI plugins, where kos-agent installs
	// kos-cni and where Multus looks for it.
	BinDir string `json:"binDir,omitempty"`
}

// Monitoring configures kos-monitoring.
type Monitoring struct {
	// SelectorLabels are added to the PodMonitors and the PrometheusRule of
	// the Prometheus Operator variant, for the cluster's Prometheus's
	// podMonitorSelector and ruleSelector.
	SelectorLabels map[string]string `json:"selectorLabels,omitempty"`
	// Retention is how long the bundled Prometheus keeps samples, as its
	// --storage.tsdb.retention.time (such as 15d).
	Retention string `json:"retention,omitempty"`
}

// Patch is a patch of rendered objects.
type Patch struct {
	// Target selects the objects to patch; without it, a strategic merge
	// patch patches the object its apiVersion, kind and metadata name.
	Target *Target `json:"target,omitempty"`
	// Patch is a strategic merge patch (a YAML or JSON object) or a JSON
	// 6902 patch (a list of operations; it needs Target).
	Patch string `json:"patch"`
}

// Target selects objects, as kustomize's patch targets.
type Target struct {
	Group         string `json:"group,omitempty"`
	Version       string `json:"version,omitempty"`
	Kind          string `json:"kind,omitempty"`
	Name          string `json:"name,omitempty"`
	Namespace     string `json:"namespace,omitempty"`
	LabelSelector string `json:"labelSelector,omitempty"`
}
