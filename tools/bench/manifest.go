package bench

import (
	"fmt"
	"strings"
)

// SelectorKey labels every object of a benchmark manifest, with the
// manifest's namespace as its value, so that kubectl --prune -l and channels
// select the same objects.
const SelectorKey = "bench.kos.example.com/set"

// PruneAllowlist names the kinds Manifest writes, for kubectl --prune.
var PruneAllowlist = []string{
	"core/v1/ConfigMap", "core/v1/Secret", "core/v1/ServiceAccount", "core/v1/Service",
	"rbac.authorization.k8s.io/v1/Role", "rbac.authorization.k8s.io/v1/RoleBinding", "apps/v1/Deployment",
}

// Manifest writes a manifest of n objects of mixed kinds, all in namespace ns
// (which the manifest creates): ConfigMaps, Secrets, ServiceAccounts,
// Services, Roles, RoleBindings and Deployments in turn, each labelled
// SelectorKey=ns. Objects whose index is at least keep are left out, as an
// upgrade that drops them would.
func Manifest(ns string, n, keep int) []byte {
	return ManifestWithReplicas(ns, n, keep, 1)
}

// ManifestWithReplicas is Manifest with the Deployments' replicas given: 0
// makes Deployments that kube-controller-manager rolls out without any node.
func ManifestWithReplicas(ns string, n, keep, replicas int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels:\n    %s: %s\n", ns, SelectorKey, ns)
	for i := 1; i < n && i < keep; i++ {
		b.WriteString("---\n")
		name := fmt.Sprintf("obj-%03d", i)
		meta := fmt.Sprintf("metadata:\n  name: %s\n  namespace: %s\n  labels:\n    %s: %s\n", name, ns, SelectorKey, ns)
		switch i % 7 {
		case 0:
			fmt.Fprintf(&b, "apiVersion: v1\nkind: ConfigMap\n%sdata:\n  key: value-%d\n", meta, i)
		case 1:
			fmt.Fprintf(&b, "apiVersion: v1\nkind: Secret\n%sstringData:\n  token: secret-%d\n", meta, i)
		case 2:
			fmt.Fprintf(&b, "apiVersion: v1\nkind: ServiceAccount\n%s", meta)
		case 3:
			fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\n%sspec:\n  selector:\n    app: %s\n  ports:\n  - port: 80\n", meta, name)
		case 4:
			fmt.Fprintf(&b, "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n%srules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get]\n", meta)
		case 5:
			fmt.Fprintf(&b, "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n%sroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: %s\nsubjects:\n- kind: ServiceAccount\n  name: default\n  namespace: %s\n", meta, name, ns)
		case 6:
			fmt.Fprintf(&b, "apiVersion: apps/v1\nkind: Deployment\n%sspec:\n  replicas: %d\n  selector:\n    matchLabels:\n      app: %s\n  template:\n    metadata:\n      labels:\n        app: %s\n    spec:\n      containers:\n      - name: main\n        image: registry.k8s.io/pause:3.10\n", meta, replicas, name, name)
		}
	}
	return []byte(b.String())
}
