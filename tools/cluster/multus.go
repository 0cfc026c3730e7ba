package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/kos-sdn/kos/tools/testenv"
)

// With Options.Multus, every node runs Multus's thin plugin, built by
// tools/multus/build.sh, as its network: the node's containerd loads only
// the first configuration of its net.d in name order, which is
// multusConfFile, and Multus runs the node's own network (inlined as its
// delegate) for eth0, then a plugin for each NetworkAttachmentDefinition a
// pod's k8s.v1.cni.cncf.io/networks annotation names, all from the node's
// cniBinPath. It reads pods and NetworkAttachmentDefinitions, and writes the
// pods' network-status annotation, as multusUser, whose rights come with the
// CRD from tools/multus/testdata. Within the node it keeps its cache of what
// each sandbox got in /var/lib/cni/multus, the node's own.

// Multus's files: its binary in cniBinPath, and its configuration,
// kubeconfig and log in the node's folder.
const (
	multusBinary         = "multus"
	multusConfFile       = "00-multus.conf"
	multusKubeconfigFile = "multus.kubeconfig"
	multusLogFile        = "multus.log"
)

// multusUser is Multus's user towards kube-apiserver, which
// tools/multus/testdata/multus-rbac.yaml gives its rights.
const multusUser = "system:multus"

// multusManifests are the files of tools/multus/testdata that Start applies
// before the nodes start.
var multusManifests = []string{"network-attachment-definitions.yaml", "multus-rbac.yaml"}

// fieldManager is the cluster's name as the manager of the fields it
// applies.
const fieldManager = "kos-test-cluster"

// findMultus returns the multus binary that tools/multus/build.sh builds,
// once, into its cache. The build's progress goes to stderr so that a cold
// first build, which takes minutes, is not silent.
func findMultus(ctx context.Context) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", fmt.Errorf("locating tools/multus/build.sh: %w", err)
	}
	script := filepath.Join(root, "tools", "multus", "build.sh")
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building Multus with %s: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	binary := filepath.Join(strings.TrimSpace(lines[len(lines)-1]), multusBinary)
	info, err := os.Stat(binary)
	if err != nil {
		return "", fmt.Errorf("%s printed no folder holding %s: %w", script, multusBinary, err)
	}
	if info.IsDir() || info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file", binary)
	}
	return binary, nil
}

// writeMultusConfig writes the node's Multus configuration into its net.d,
// ahead of its own network, which it delegates eth0 to. The delegate is
// inlined rather than named by path (clusterNetwork): Multus then caches
// the configuration it added with, and deletes with the same one.
func writeMultusConfig(n *nodeState) error {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "multus-cni-network",
		"type":       "multus",
		"kubeconfig": filepath.Join(n.NodeDir, multusKubeconfigFile),
		"binDir":     cniBinPath,
		"logFile":    filepath.Join(n.NodeDir, multusLogFile),
		"logLevel":   "verbose",
		"delegates":  []any{nodeNetwork(n)},
	}
	return writeJSON(filepath.Join(n.cniConfDir(), multusConfFile), conf)
}

// applyMultusAPI applies the NetworkAttachmentDefinition CRD and Multus's
// RBAC, and waits until the CRD is Established.
func (c *Cluster) applyMultusAPI(ctx context.Context) error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return fmt.Errorf("locating tools/multus/testdata: %w", err)
	}
	client, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(c.RESTConfig)
	if err != nil {
		return fmt.Errorf("creating a discovery client: %w", err)
	}
	groups, err := restmapper.GetAPIGroupResources(disc)
	if err != nil {
		return fmt.Errorf("reading the API's resources: %w", err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	var crds []string
	for _, name := range multusManifests {
		objs, err := readManifest(filepath.Join(root, "tools", "multus", "testdata", name))
		if err != nil {
			return err
		}
		for _, obj := range objs {
			gvk := obj.GroupVersionKind()
			mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				return fmt.Errorf("applying %s %s: %w", gvk.Kind, obj.GetName(), err)
			}
			var r dynamic.ResourceInterface = client.Resource(mapping.Resource)
			if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
				r = client.Resource(mapping.Resource).Namespace(obj.GetNamespace())
			}
			if _, err := r.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
				return fmt.Errorf("applying %s %s: %w", gvk.Kind, obj.GetName(), err)
			}
			if gvk.GroupKind() == crdKind {
				crds = append(crds, obj.GetName())
			}
		}
	}
	for _, name := range crds {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, c.timeout, true, func(ctx context.Context) (bool, error) {
			crd, err := client.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return established(crd), nil
		})
		if err != nil {
			return fmt.Errorf("waiting for CRD %s to be Established: %w", name, err)
		}
	}
	return nil
}

// The CustomResourceDefinition kind and resource.
var (
	crdKind     = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}
	crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// established reports whether a CRD's Established condition is True.
func established(crd *unstructured.Unstructured) bool {
	conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conditions {
		if cond, ok := c.(map[string]any); ok && cond["type"] == "Established" && cond["status"] == "True" {
			return true
		}
	}
	return false
}

// readManifest reads the objects of a YAML file of one or more documents.
func readManifest(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading a manifest: %w", err)
	}
	defer f.Close()
	var objs []*unstructured.Unstructured
	decoder := yaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		obj := &unstructured.Unstructured{}
		err := decoder.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}
