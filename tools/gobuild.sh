# gobuild.sh is sourced by the build scripts under tools/ (etcd, kops,
# versitygw, kube) that build a command from the Go module proxy into a
# folder of .cache/ kept per version, so that only the first run pays.

# required_version GOMOD MODULE prints the version of MODULE that GOMOD
# requires directly (a // indirect line does not count).
required_version() {
  awk -v m="$2" '{sub(/^require /, "")} $1 == m && !/indirect/ {print $2; exit}' "$1"
}

# lock_build DIR waits until no other build writes into DIR, and holds DIR
# until the script exits: test packages run in parallel and each may call a
# build script, so whoever waited finds the binaries built.
lock_build() {
  exec 9>"$1/.build.lock"
  if ! flock -n 9; then
    echo "build.sh: another build into $1 is running; waiting for it..." >&2
    flock 9
  fi
}

# build_cached OUT NAME LABEL PKG LDFLAGS [TOOLCHAIN] builds the Go package
# PKG into OUT/NAME unless it is there, saying so as LABEL. TOOLCHAIN is the
# go command's GOTOOLCHAIN: local (the default), or a release such as
# go1.27.3 for a module that needs a newer Go than the tree's, which the go
# command then fetches from the module proxy (once, into the module cache).
# $BUILD_TAGS, when set, is the build's -tags list.
build_cached() {
  local out=$1 name=$2 label=$3 pkg=$4 ldflags=$5 toolchain=${6:-local} start
  [ -x "$out/$name" ] && return 0
  echo "building $label from the Go module proxy; the first build takes several minutes..." >&2
  start=$(date +%s)
  # The temporary name keeps a half-written binary from ever looking built.
  GOTOOLCHAIN=$toolchain GOFLAGS=-mod=mod CGO_ENABLED=0 \
    go build -trimpath -tags "${BUILD_TAGS:-}" -ldflags "$ldflags" -o "$out/$name.tmp.$$" "$pkg"
  mv "$out/$name.tmp.$$" "$out/$name"
  echo "built $label in $(( $(date +%s) - start ))s" >&2
}
