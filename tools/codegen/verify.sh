#!/usr/bin/env bash
# verify.sh fails when the committed generated code differs from what generate.sh
# produces now: it regenerates into a temporary copy of the API packages and
# compares the copy with the repository, leaving the repository untouched.
#
#   tools/codegen/verify.sh
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Only what the generators read or write: the module files, the API types, the
# generated tree and these scripts.
checked=(components/apis components/generated tools/codegen)
cp "$repo/go.mod" "$repo/go.sum" "$tmp/"
for p in "${checked[@]}"; do
  mkdir -p "$tmp/$(dirname "$p")"
  cp -R "$repo/$p" "$tmp/$p"
done

CODEGEN_BIN=${CODEGEN_BIN:-$repo/.cache/bin} "$tmp/tools/codegen/generate.sh" "$tmp" >/dev/null

status=0
for p in "${checked[@]}"; do
  if ! diff -Nru "$repo/$p" "$tmp/$p"; then
    status=1
  fi
done
if [ "$status" -ne 0 ]; then
  echo "generated code is out of date: run tools/codegen/generate.sh (make generate) and commit the result" >&2
  exit 1
fi
echo "generated code is up to date"
