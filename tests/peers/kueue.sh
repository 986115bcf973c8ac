#!/usr/bin/env bash
# Builds Kueue (sigs.k8s.io/kueue, the job queueing controller `gpu-admission kueue export` writes for) from its
# Go module into a cache folder outside the clone, only when it is missing, for tests/tests/cluster_kueue.rs:
#   bin/kueue            the manager, cmd/kueue of the module
#   crd/*.yaml           its CRDs (config/components/crd/bases of the module; API kueue.x-k8s.io/v1beta2)
#   webhook/manifests.yaml  its webhook configurations (config/components/webhook of the module), which the
#                        test registers with the apiserver pointing at 127.0.0.1 and a CA of its own
#
# Usage: kueue.sh [--trim]   prints the folder on its last line
#   --trim: once the folder is complete, delete the Go build and module caches (CI, whose machine is fresh)
# Env:   GPU_ADMISSION_CACHE   cache folder (default ~/.cache/gpu-admission); everything goes under peers/:
#                              kueue-vVERSION (the folder above), kueue-go/gopath/pkg/mod (module cache),
#                              kueue-go/gocache (Go build cache), kueue-go/src (the tiny build module)
# Needs Go >= 1.25 on PATH and the Go module proxy. Nothing is installed system-wide.
# Cold on 2 cores: 8.5 min (measured 2026-11-26 beside a Jaeger build and a Rust build); disk 2.8 GB at the
# peak: the folder 0.12 (binary 120 MB, CRDs 1.6 MB), Go build cache 1.9, modules 0.74; --trim keeps the folder
# only. Cached: nothing to do (< 0.1 s).
set -euo pipefail
trim=0
if [[ ${1:-} == --trim ]]; then trim=1; shift; fi
VERSION=0.17.0
cache=${GPU_ADMISSION_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-admission}
P=$cache/peers
D=$P/kueue-v$VERSION
G=$P/kueue-go

complete() {
  [[ -x $D/bin/kueue && -f $D/webhook/manifests.yaml ]] && compgen -G "$D/crd/*.yaml" >/dev/null
}
# The Go caches, deleted on --trim (the module cache is read-only: go clean empties it).
trim_caches() {
  ((trim)) || return 0
  if [[ -d $G/gopath/pkg/mod ]]; then
    GOPATH=$G/gopath GOMODCACHE=$G/gopath/pkg/mod go clean -modcache 2>/dev/null || chmod -R u+w "$G/gopath"
  fi
  rm -rf "$G"
  echo "kueue.sh: Go build and module caches deleted (--trim)" >&2
}
if complete; then trim_caches; echo "$D"; exit 0; fi

command -v go >/dev/null || {
  echo "kueue.sh: Go is not on PATH; install Go >= 1.25 (https://go.dev/dl/)" >&2
  exit 1
}
mkdir -p "$D" "$G"
# One build at a time per cache (test processes may ask together); the second finds the folder complete.
exec 9>"$P/kueue.lock"
flock 9
if complete; then trim_caches; echo "$D"; exit 0; fi

export GOPATH=$G/gopath GOMODCACHE=$G/gopath/pkg/mod GOCACHE=$G/gocache GOFLAGS=-mod=mod
t=$SECONDS
echo "kueue.sh: building Kueue v$VERSION into $D; about 9 minutes cold on 2 cores" >&2
mkdir -p "$G/src/kueue-$VERSION" && cd "$G/src/kueue-$VERSION"
[[ -f go.mod ]] || go mod init "local/kueue-$VERSION" >/dev/null 2>&1
printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/kueue/cmd/kueue"\n' >tools.go
go get "sigs.k8s.io/kueue@v$VERSION" >/dev/null 2>&1 || go get "sigs.k8s.io/kueue@v$VERSION"
go mod tidy >/dev/null 2>&1 || go mod tidy
src=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
# Into temp names first, so an interrupted build never leaves a folder that looks complete.
tmp=$(mktemp -d "$D/.build.XXXXXX")
go build -o "$tmp/kueue" sigs.k8s.io/kueue/cmd/kueue
mkdir -p "$tmp/crd" "$tmp/webhook"
cp "$src"/config/components/crd/bases/*.yaml "$tmp/crd/"
cp "$src/config/components/webhook/manifests.yaml" "$tmp/webhook/"
chmod -R u+w "$tmp"
rm -rf "$D/bin" "$D/crd" "$D/webhook"
mkdir -p "$D/bin"
mv "$tmp/kueue" "$D/bin/kueue"
mv "$tmp/crd" "$tmp/webhook" "$D/"
rmdir "$tmp"
echo "kueue.sh: Kueue v$VERSION in $((SECONDS - t)) s" >&2
trim_caches
echo "$D"
