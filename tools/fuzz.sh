#!/usr/bin/env bash
# fuzz.sh is `make fuzz`: it runs every native Go fuzz target of the module,
# one at a time (go test -fuzz takes one target per run), for FUZZTIME each
# (default 1m; a duration, or a count of inputs such as 5000x). `make test`
# runs it with FUZZTIME=5000x, a few seconds per target. A failing input is
# written to the package's testdata/fuzz/<Target>/; fix the bug and commit
# the input, which every later `go test` then replays as a regression case.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
fuzztime=${FUZZTIME:-1m}

# Every package with a fuzz target, and its targets.
mapfile -t files < <(find . -name '*_fuzz_test.go' -not -path './.cache/*' -not -path './.git/*' | sed 's|^\./||' | sort)
for file in "${files[@]}"; do
  pkg=./$(dirname "$file")
  for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(f \*testing\.F).*/\1/p' "$file"); do
    printf '==> %s %s (%s)\n' "$pkg" "$target" "$fuzztime"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
  done
done
