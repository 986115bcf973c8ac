#!/usr/bin/env bash
# Builds Jaeger from its Go module into a cache folder outside the clone, once:
#   jaeger   github.com/jaegertracing/jaeger vVERSION, cmd/jaeger (Jaeger v2: an OpenTelemetry-Collector-based
#            binary; OTLP receivers, in-memory storage, the query API; the module carries a placeholder instead
#            of the UI's assets: / serves no UI, the query API under /api does)
#
# Usage: jaeger.sh [--trim]   prints the binary's path on its last line
#   --trim: once the binary is there, delete the Go build and module caches (CI, whose machine is fresh)
# Env:   GPU_ADMISSION_CACHE   cache folder (default ~/.cache/gpu-admission); everything goes under
#                              peers/jaeger-vVERSION/: bin/jaeger, gopath/pkg/mod (module cache), gocache (Go build
#                              cache), src (the tiny build module)
# Needs Go >= 1.25 on PATH and the Go module proxy. Nothing is installed system-wide.
# Cold on 2 cores, measured 2026-11-26 on a machine shared with other builds (load average ≈ 9): 8 min 55 s
# (6 min user CPU); disk 3.3 GB: the binary 117 MB, Go build cache 1.6 GB, modules 1.7 GB (117 MB kept with
# --trim). Cached: nothing to do.
set -euo pipefail
trim=0
if [[ ${1:-} == --trim ]]; then trim=1; shift; fi
VERSION=1.76.0
cache=${GPU_ADMISSION_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-admission}
C=$cache/peers/jaeger-v$VERSION
B=$C/bin

trim_caches() {
  ((trim)) || return 0
  if [[ -d $C/gopath/pkg/mod ]]; then
    # The module cache is read-only: go clean empties it.
    GOPATH=$C/gopath GOMODCACHE=$C/gopath/pkg/mod go clean -modcache 2>/dev/null || chmod -R u+w "$C/gopath"
  fi
  rm -rf "$C/gocache" "$C/gopath"
  echo "jaeger.sh: Go build and module caches deleted (--trim)" >&2
}
if [[ -x $B/jaeger ]]; then trim_caches; echo "$B/jaeger"; exit 0; fi

command -v go >/dev/null || {
  echo "jaeger.sh: Go is not on PATH; install Go >= 1.25 (https://go.dev/dl/)" >&2
  exit 1
}
mkdir -p "$B" "$C/src"
# One build at a time per cache (test processes may ask together); the second finds the binary.
exec 9>"$C/build.lock"
flock 9
if [[ -x $B/jaeger ]]; then trim_caches; echo "$B/jaeger"; exit 0; fi

echo "jaeger.sh: building Jaeger v$VERSION (cmd/jaeger) into $B; about 9 minutes cold on 2 cores" >&2
t=$SECONDS
export GOPATH=$C/gopath GOMODCACHE=$C/gopath/pkg/mod GOCACHE=$C/gocache GOFLAGS=-mod=mod
cd "$C/src"
[[ -f go.mod ]] || go mod init local/jaeger >/dev/null 2>&1
printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/jaegertracing/jaeger/cmd/jaeger"\n' >tools.go
go get "github.com/jaegertracing/jaeger@v$VERSION" >/dev/null 2>&1 || go get "github.com/jaegertracing/jaeger@v$VERSION"
go mod tidy >/dev/null 2>&1 || go mod tidy
# Into a temp name first, so an interrupted build never leaves a binary that looks complete.
tmp=$(mktemp -d "$B/.build.XXXXXX")
go build -o "$tmp/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger
mv "$tmp/jaeger" "$B/jaeger"
rmdir "$tmp"
echo "jaeger.sh: Jaeger v$VERSION in $((SECONDS - t)) s" >&2
trim_caches
echo "$B/jaeger"
