//go:build tools

// Package codegen pins the code generators that generate.sh runs, so that go.mod
// keeps them at the versions of the Kubernetes libraries the project uses. The
// build tag keeps them out of every ordinary build.
package codegen

import (
	_ "k8s.io/code-generator/cmd/client-gen"
	_ "k8s.io/code-generator/cmd/conversion-gen"
	_ "k8s.io/code-generator/cmd/deepcopy-gen"
	_ "k8s.io/code-generator/cmd/defaulter-gen"
	_ "k8s.io/code-generator/cmd/informer-gen"
	_ "k8s.io/code-generator/cmd/lister-gen"
	_ "k8s.io/kube-openapi/cmd/openapi-gen"
)
