package kosinstall

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Local volumes: the standard kos-etcd release keeps each member's data on a
// volume of the cluster's default StorageClass. A cluster of local nodes has
// no storage provisioner, so whoever installs KOS there provides the volumes
// by hand, as an operator of bare-metal nodes would: a default StorageClass
// without a provisioner that binds a claim only once its pod is scheduled,
// and one local PersistentVolume per node, pinned to that node.
const (
	// LocalStorageClass is the default StorageClass ProvideLocalVolumes makes.
	LocalStorageClass = "kos-local"
	// VolumesDir is the node path under which the local volumes live, one
	// folder per volume.
	VolumesDir = "/var/lib/kos-volumes"
	// noProvisioner is the provisioner of a class whose volumes are made by
	// hand.
	noProvisioner = "kubernetes.io/no-provisioner"
	// defaultClassAnnotation makes a StorageClass the cluster's default.
	defaultClassAnnotation = "storageclass.kubernetes.io/is-default-class"
	// volumeLabel marks the volumes ProvideLocalVolumes makes.
	volumeLabel = "kos.example.com/local-volume"
)

// VolumeNode is a node to provide a local volume on.
type VolumeNode struct {
	// Name is the node's name.
	Name string
	// HostDir is the folder on this host that the node sees as VolumesDir.
	HostDir string
}

// ProvideLocalVolumes makes LocalStorageClass the cluster's default
// StorageClass and gives every node one local PersistentVolume of size
// bytes, named local-<node>, in VolumesDir/local-<node> on that node (the
// folder is created in the node's HostDir). What exists already is kept, so
// that running it again changes nothing.
func ProvideLocalVolumes(ctx context.Context, kube kubernetes.Interface, nodes []VolumeNode, size resource.Quantity) error {
	binding := storagev1.VolumeBindingWaitForFirstConsumer
	retain := corev1.PersistentVolumeReclaimRetain
	class := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        LocalStorageClass,
			Annotations: map[string]string{defaultClassAnnotation: "true"},
		},
		Provisioner: noProvisioner,
		// A claim binds to a volume only once its pod is scheduled, so
		// that the scheduler picks the node and the volume follows.
		VolumeBindingMode: &binding,
		ReclaimPolicy:     &retain,
	}
	if _, err := kube.StorageV1().StorageClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating StorageClass %s: %w", LocalStorageClass, err)
	}
	for _, n := range nodes {
		name := "local-" + n.Name
		// Owned by root and open to the pod's fsGroup, which kubelet
		// applies to local volumes.
		if err := os.MkdirAll(filepath.Join(n.HostDir, name), 0o755); err != nil {
			return fmt.Errorf("creating the folder of volume %s: %w", name, err)
		}
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{volumeLabel: "true"}},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: retain,
				StorageClassName:              LocalStorageClass,
				PersistentVolumeSource: corev1.PersistentVolumeSource{
					Local: &corev1.LocalVolumeSource{Path: path.Join(VolumesDir, name)},
				},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key:      corev1.LabelHostname,
						Operator: corev1.NodeSelectorOpIn,
						Values:   []string{n.Name},
					}}}},
				}},
			},
		}
		if _, err := kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating PersistentVolume %s: %w", name, err)
		}
	}
	return nil
}
