#!/usr/bin/env bash
# generate.sh rewrites all generated code of the KOS API: deepcopy, conversion and
# defaulting functions next to the types in components/apis/network, and the
# clientset, listers, informers and OpenAPI definitions in components/generated.
#
#   tools/codegen/generate.sh [ROOT]
#
# ROOT is the module to generate in (default: this repository); verify.sh passes a
# copy. The generators are built from the versions go.mod pins (see tools.go) into
# $CODEGEN_BIN (default: <repository>/.cache/bin), which git ignores.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
root=$(cd "${1:-$repo}" && pwd)
bin=${CODEGEN_BIN:-$repo/.cache/bin}
export GOTOOLCHAIN=local

cd "$root"
module=$(go list -m)
apis=$module/components/apis
gen=$module/components/generated
header=$here/boilerplate.go.txt

mkdir -p "$bin"
go build -o "$bin/" \
  k8s.io/code-generator/cmd/deepcopy-gen \
  k8s.io/code-generator/cmd/conversion-gen \
  k8s.io/code-generator/cmd/defaulter-gen \
  k8s.io/code-generator/cmd/client-gen \
  k8s.io/code-generator/cmd/lister-gen \
  k8s.io/code-generator/cmd/informer-gen \
  k8s.io/kube-openapi/cmd/openapi-gen

# Stale output of types that no longer exist must not survive a run.
find components/apis -name 'zz_generated.*.go' -delete
rm -rf components/generated/clientset components/generated/listers \
  components/generated/informers components/generated/openapi

"$bin/deepcopy-gen" --go-header-file "$header" --output-file zz_generated.deepcopy.go \
  "$apis/network" "$apis/network/v1alpha1" "$apis/multinetworkpolicy/v1beta1"
"$bin/defaulter-gen" --go-header-file "$header" --output-file zz_generated.defaults.go \
  "$apis/network/v1alpha1"
"$bin/conversion-gen" --go-header-file "$header" --output-file zz_generated.conversion.go \
  "$apis/network/v1alpha1"

# The OpenAPI definitions also cover the apimachinery types ours embed, so that
# the server can publish a complete schema (kubectl explain reads it).
# Our types name their OpenAPI models (OpenAPIModelName, in
# zz_generated.model_name.go, from +k8s:openapi-model-package) as the
# apimachinery types do since 0.37: the server finds each kind's
# group-version-kind by that name.
# The apimachinery packages are inputs only: --readonly-pkg keeps openapi-gen
# from rewriting their model name files in the module cache.
"$bin/openapi-gen" --go-header-file "$header" --output-file zz_generated.openapi.go \
  --output-model-name-file zz_generated.model_name.go \
  --readonly-pkg k8s.io/apimachinery/pkg/apis/meta/v1 \
  --readonly-pkg k8s.io/apimachinery/pkg/runtime \
  --readonly-pkg k8s.io/apimachinery/pkg/version \
  --output-dir components/generated/openapi --output-pkg "$gen/openapi" \
  --report-filename "$here/api-rule-violations.list" \
  k8s.io/apimachinery/pkg/apis/meta/v1 \
  k8s.io/apimachinery/pkg/runtime \
  k8s.io/apimachinery/pkg/version \
  "$apis/network/v1alpha1"

"$bin/client-gen" --go-header-file "$header" \
  --clientset-name versioned \
  --input-base "$apis" --input network/v1alpha1 \
  --output-dir components/generated/clientset --output-pkg "$gen/clientset"
"$bin/lister-gen" --go-header-file "$header" \
  --output-dir components/generated/listers --output-pkg "$gen/listers" \
  "$apis/network/v1alpha1"
"$bin/informer-gen" --go-header-file "$header" \
  --versioned-clientset-package "$gen/clientset/versioned" \
  --listers-package "$gen/listers" \
  --output-dir components/generated/informers --output-pkg "$gen/informers" \
  "$apis/network/v1alpha1"
