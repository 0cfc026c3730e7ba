#!/usr/bin/env bash
# verify.sh is `make verify`: formatting, vet, tidy modules, the import
# directions the architecture promises, and generated code that matches its
# generators. It changes nothing; it fails and says what to run instead.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
module=$(go list -m)
fail=0

echo "verify: gofmt"
unformatted=$(gofmt -l $(git ls-files --cached --others --exclude-standard '*.go') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
  echo "these files need gofmt (run: gofmt -w <file>):"; echo "$unformatted"; fail=1
fi

echo "verify: go vet"
go vet ./... || fail=1

echo "verify: go.mod is tidy"
if ! go mod tidy -diff >/dev/null 2>&1; then
  echo "go.mod/go.sum are not tidy (run: go mod tidy)"; fail=1
fi

echo "verify: import directions"
# forbid PKG_PATTERN IMPORT_PREFIX WHY [ALLOWED_PREFIX]: no package matching
# the pattern may depend (directly or not) on a package under the import
# prefix, except on those under the allowed prefix. A prefix is an extended
# regular expression.
forbid() {
  local pattern=$1 prefix=$2 why=$3 allowed=${4:-} bad
  bad=$(go list -deps -f '{{.ImportPath}}' $pattern 2>/dev/null | grep -E "^${prefix}(/|$)" || true)
  if [ -n "$allowed" ] && [ -n "$bad" ]; then
    bad=$(echo "$bad" | grep -vE "^${allowed}(/|$)" || true)
  fi
  if [ -n "$bad" ]; then
    echo "$pattern must not import $prefix ($why), but depends on:"; echo "$bad" | sed 's/^/  /'; fail=1
  fi
}
forbid ./channels/... "$module/components" "the addon manager knows nothing of the SDN"
forbid "./channels/... ./cmd/... ./release/... ./addons/..." "$module/tools" "tools/ is for developers and CI; nothing that ships imports it"
# channels' layers (channels/doc.go): the Lease and the diff import nothing of
# channels, loading channel files its wire types only, deciding (install)
# loading only and no client of arbitrary objects, previews the diff only
# and no client at all, the dry-run previews only (the apply code hands it
# the releases it prepared); neither the library nor the daemon imports the
# CLI.
forbid ./channels/lease "$module/channels" "the run Lease is a leaf" "$module/channels/lease"
forbid ./channels/diff "$module/channels" "unified diffs are a leaf" "$module/channels/diff"
forbid ./channels/channel "$module/channels" "loading channel files needs their wire types only" "$module/channels/(channel|api)"
forbid ./channels/install "$module/channels" "deciding reads records and channels and applies nothing" "$module/channels/(install|channel|api)"
forbid ./channels/install "k8s.io/client-go/dynamic" "deciding reads install records (Namespaces) only; the objects are the applier's"
forbid ./channels/preview "$module/channels" "a preview is what a dry-run found and its diff" "$module/channels/(preview|diff)"
forbid ./channels/preview "k8s.io/client-go" "a preview makes no request; channels/dryrun fills it in"
forbid ./channels/dryrun "$module/channels" "a dry-run previews what the apply code prepared, which calls it" "$module/channels/(dryrun|preview|diff)"
forbid ./channels/internal/channelstest "$module/channels" "the tests of package channels use it" "$module/channels/(channel|api|internal/channelstest)"
forbid "./channels ./channels/daemon" "$module/channels/cli" "the CLI is one client of the library"
forbid "./release/... ./addons/..." "$module/components" "a release's renderer knows manifests, not the SDN's code"
if [ -d components ]; then
  forbid "./components/..." "$module/channels" "the SDN does not depend on the addon manager"
  forbid "./components/..." "$module/tools" "tools/ is for developers and CI; nothing that ships imports it"
  # One binary's package never imports another binary's: a name two
  # binaries share lives in components/apis/... (STYLE.md).
  forbid ./components/agent/... "$module/components/controllers" "a name the agent shares with a controller lives in components/apis"
  forbid ./components/agent/... "$module/components/(nodeovs|nodecleanup)" "kos-agent cleanup is package nodecleanup, which main adds; the agent starts no Open vSwitch"
  forbid ./components/apiserver/... "$module/components/fabric" "the apiserver knows no node's switch; the MAC function is v1alpha1's"
  forbid ./components/kubectlkos/... "$module/components/agent" "kubectl kos speaks to agents over HTTP and shares only their wire types" "$module/components/agent/api"
  # docs/benchmarks.md, CNI ADD under churn.
  forbid ./cmd/kos-cni "(net/http|crypto/tls|k8s\.io)" "the plugin runs per ADD and DEL, and a process's start pays for every package it links; it speaks HTTP/1.0 itself"
fi
forbid ./tools/testenv "$module/tools/(cluster|ovsenv|images)" "the control plane leads into no node: nodes are tools/cluster's"
if [ -d components/fabric/ovs ]; then
  forbid ./components/fabric/ovs/... "k8s.io/client-go" "the OVS fabric talks to OVS only"
fi

echo "verify: the docs' tables of figures match their figures files"
go run ./tools/figures/doc docs/*.md || { echo "a table of figures differs from its file (run: go run ./tools/figures/doc -write docs/<page>.md)"; fail=1; }

echo "verify: every block of the docs marked to run runs in a test"
go run ./tools/docrun/check -tests tools/e2e docs/*.md || { echo "a block marked \`\`\`sh run runs in no test (see above)"; fail=1; }

# Only the newest release is rendered again: 0.1.0 to 0.3.0 were written by
# hand before addons/source existed, so no source renders their bytes, and
# their hashes are a contract; they are held to their hashes and to git.
echo "verify: addon bundle (the newest release re-rendered from addons/source and compared; older releases, written before the sources, held to their hashes and to git, not re-rendered; bootstrap-channel.yaml)"
go run ./tools/addons verify || { echo "the addon bundle is not consistent (see above; new releases: make addons)"; fail=1; }

if [ -x tools/codegen/verify.sh ]; then
  echo "verify: generated code"
  tools/codegen/verify.sh || { echo "generated code is stale (run: make generate)"; fail=1; }
  # The generators read dependencies from the module cache; they must not
  # have written there.
  echo "verify: the module cache holds the dependencies as downloaded"
  go mod verify >/dev/null || { echo "a dependency in the module cache was changed (go mod verify; go clean -modcache fixes it)"; fail=1; }
fi

echo "verify: commit messages"
# A subject is `area: what changed` in at most 72 characters, and a body is
# set off by a blank line (STYLE.md). Checked from the commit that brought
# this check on; history before it is not rewritten.
history_base=87f9125d441d596fcb32261072653fb6461b93aa
if git rev-parse -q --verify "$history_base^{commit}" >/dev/null 2>&1; then
  while read -r c; do
    subject=$(git log -1 --format=%s "$c")
    second=$(git log -1 --format=%B "$c" | sed -n 2p)
    if [ "${#subject}" -gt 72 ] || [[ "$subject" != *": "* ]] || [ -n "$second" ]; then
      echo "commit ${c:0:12}: want a subject 'area: what changed' of at most 72 characters, then a blank line: $subject"; fail=1
    fi
  done < <(git rev-list --no-merges "$history_base..HEAD")
fi

if [ $fail -ne 0 ]; then
  echo "verify: FAILED"; exit 1
fi
echo "verify: ok"
