#!/usr/bin/env bash
# Builds the real-cluster tier's control plane from Go modules, into a cache folder outside the clone, each
# piece only when it is missing:
#   kube-apiserver, kube-scheduler, kube-controller-manager   k8s.io/kubernetes vK8S, every staging module k8s.io/X
#                                                             pinned to v0.MINOR.PATCH (as any importer does), the
#                                                             version stamped (else it says v0.0.0-master, which
#                                                             kubectl cannot parse)
#   etcd                                                      go.etcd.io/etcd/server/v3 (a main calling etcdmain)
#   kwok (plays the kubelet for fake Nodes) + its stages      sigs.k8s.io/kwok (stage definitions from its module)
#
# Usage: build.sh [--trim] [K8S_VERSION]   prints the bin directory on its last line
#   --trim: once the binaries are there, delete the Go build and module caches (≈ 5.8 GB after a cold build;
#           CI, whose machine is fresh: another version would then build cold again)
# Env:   GPU_ADMISSION_K8S_VERSION    Kubernetes version when no argument is given (default 1.37.2; supported
#                                     1.34.x, the first with DRA resource.k8s.io/v1, to 1.37.x)
#        GPU_ADMISSION_CACHE          cache folder (default ~/.cache/gpu-admission); everything goes under k8s/:
#                                     v$K8S/bin (the binaries), gopath/pkg/mod (module cache), gocache (Go build
#                                     cache, shared by every piece and version), src (the tiny build modules)
# Needs Go >= 1.25 on PATH (an older go fetches the toolchain the modules ask for through the module proxy)
# and network access to the Go module proxy. Nothing is installed system-wide.
# Cold on 2 cores: ≈ 13 min for Kubernetes, ≈ 1.5 for etcd, ≈ 2.5 for kwok; cached: nothing to do. Another
# Kubernetes version reuses the module and build caches of the first.
set -euo pipefail
trim=0
if [[ ${1:-} == --trim ]]; then trim=1; shift; fi
K=${1:-${GPU_ADMISSION_K8S_VERSION:-1.37.2}}
K=${K#v}
ETCD_VERSION=3.6.16
KWOK_VERSION=0.8.0
cache=${GPU_ADMISSION_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-admission}
C=$cache/k8s
B=$C/v$K/bin

# Marks our stages file: kwok's own pod-complete stage stamps a finished container with startedAt = finishedAt =
# now (a zero-length run, which the observer rightly refuses); ours keeps the startedAt of the running state.
stages_mark='# gpu-admission: pod-complete keeps the running startedAt'
complete() {
  [[ -x $B/kube-apiserver && -x $B/kube-scheduler && -x $B/kube-controller-manager && -x $B/etcd &&
    -x $B/kwok ]] && grep -qF "$stages_mark" "$B/kwok-stages.yaml" 2>/dev/null
}
# The Go caches, deleted on --trim (the module cache is read-only: go clean empties it).
trim_caches() {
  ((trim)) || return 0
  if [[ -d $C/gopath/pkg/mod ]]; then
    GOPATH=$C/gopath GOMODCACHE=$C/gopath/pkg/mod go clean -modcache 2>/dev/null || chmod -R u+w "$C/gopath"
  fi
  rm -rf "$C/gocache" "$C/gopath"
  echo "build.sh: Go build and module caches deleted (--trim)" >&2
}
if complete; then trim_caches; echo "$B"; exit 0; fi

[[ $K =~ ^1\.([0-9]+)\.[0-9]+$ ]] || { echo "build.sh: not a Kubernetes version: $K" >&2; exit 1; }
minor=${BASH_REMATCH[1]}
command -v go >/dev/null || {
  echo "build.sh: Go is not on PATH; install Go >= 1.25 (https://go.dev/dl/)" >&2
  exit 1
}
mkdir -p "$B"
# One build at a time per cache (test processes may ask together); the second finds the binaries.
exec 9>"$C/build.lock"
flock 9
if complete; then trim_caches; echo "$B"; exit 0; fi

export GOPATH=$C/gopath GOMODCACHE=$C/gopath/pkg/mod GOCACHE=$C/gocache GOFLAGS=-mod=mod
# A build module of our own in $C/src/NAME: go.mod, go.sum and one Go file.
module_dir() {
  mkdir -p "$C/src/$1" && cd "$C/src/$1"
  [[ -f go.mod ]] || go mod init "local/$1" >/dev/null 2>&1
}
# go build into a temp name first, so an interrupted build never leaves a binary that looks complete.
install_bins() {
  local tmp
  tmp=$(mktemp -d "$B/.build.XXXXXX")
  go build -o "$tmp/" "$@"
  mv "$tmp"/* "$B/"
  rmdir "$tmp"
}
took() { echo "build.sh: $1 in $((SECONDS - $2)) s" >&2; }

if [[ ! -x $B/kube-apiserver || ! -x $B/kube-scheduler || ! -x $B/kube-controller-manager ]]; then
  echo "build.sh: building Kubernetes v$K (kube-apiserver, kube-scheduler, kube-controller-manager) into $B;" \
    "about 13 minutes cold on 2 cores" >&2
  t=$SECONDS
  module_dir "kubernetes-$K"
  upstream=$(go mod download -json "k8s.io/kubernetes@v$K" | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')
  [[ -f $upstream ]] || { echo "build.sh: cannot download k8s.io/kubernetes@v$K" >&2; exit 1; }
  go_line=$(grep -m1 '^go ' "$upstream")
  {
    printf 'module local/kubernetes-%s\n\n%s\n\nrequire k8s.io/kubernetes v%s\n\n' "$K" "$go_line" "$K"
    # Each staging module the upstream go.mod replaces by ./staging/src/k8s.io/X, at its published tag.
    sed -n 's#^\s*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/.*#\1#p' "$upstream" | sort -u |
      while read -r m; do printf 'replace %s => %s v0.%s\n' "$m" "$m" "${K#1.}"; done
  } >go.mod
  printf '//go:build tools\n\npackage tools\n\nimport (\n' >tools.go
  for c in kube-apiserver kube-scheduler kube-controller-manager; do
    printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c" >>tools.go
  done
  printf ')\n' >>tools.go
  go mod tidy >/dev/null 2>&1 || go mod tidy
  stamp="-X k8s.io/component-base/version.gitVersion=v$K -X k8s.io/component-base/version.gitMajor=1"
  stamp+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  install_bins -ldflags "$stamp" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kube-controller-manager
  took "Kubernetes v$K" "$t"
fi

if [[ ! -x $B/etcd ]]; then
  echo "build.sh: building etcd v$ETCD_VERSION into $B" >&2
  t=$SECONDS
  module_dir "etcd-$ETCD_VERSION"
  printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' >main.go
  go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >/dev/null 2>&1 || go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
  go mod tidy >/dev/null 2>&1 || go mod tidy
  tmp=$(mktemp -d "$B/.build.XXXXXX")
  go build -o "$tmp/etcd" . && mv "$tmp/etcd" "$B/etcd" && rmdir "$tmp"
  took "etcd v$ETCD_VERSION" "$t"
fi

if [[ ! -x $B/kwok ]]; then
  echo "build.sh: building kwok v$KWOK_VERSION into $B" >&2
  t=$SECONDS
  module_dir "kwok-$KWOK_VERSION"
  printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/kwok/cmd/kwok"\n' >tools.go
  go get "sigs.k8s.io/kwok@v$KWOK_VERSION" >/dev/null 2>&1 || go get "sigs.k8s.io/kwok@v$KWOK_VERSION"
  go mod tidy >/dev/null 2>&1 || go mod tidy
  install_bins sigs.k8s.io/kwok/cmd/kwok
  took "kwok v$KWOK_VERSION" "$t"
fi
if ! grep -qF "$stages_mark" "$B/kwok-stages.yaml" 2>/dev/null; then
  # The stages kwok plays (it plays none it is not given), from its module: a Node Ready with heartbeats; a Pod
  # through its init containers to Running and Ready, Succeeded after its pod-complete.stage.kwok.x-k8s.io/delay
  # annotation (a Job's Pods only, e.g. "30s"), and removed when deleted (as a kubelet confirms a deletion,
  # e.g. of a preemption victim).
  module_dir "kwok-$KWOK_VERSION"
  stages=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
  {
    echo "$stages_mark"
    for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml pod/general/pod-create.yaml \
      pod/general/pod-init-container-running.yaml pod/general/pod-init-container-completed.yaml \
      pod/general/pod-ready.yaml pod/general/pod-complete.yaml pod/general/pod-delete.yaml; do
      printf -- '---\n'
      if [[ $f == */pod-complete.yaml ]]; then
        # shellcheck disable=SC2016 # a Go template, not a shell expansion
        sed 's/^\( *\)startedAt: {{ \$now | Quote }}$/\1startedAt: {{ with $origin.state.running }}{{ .startedAt | Quote }}{{ else }}{{ $now | Quote }}{{ end }}/' "$stages/$f"
      else
        cat "$stages/$f"
      fi
    done
  } >"$B/kwok-stages.yaml.tmp"
  grep -q 'with $origin.state.running' "$B/kwok-stages.yaml.tmp" ||
    { echo "build.sh: kwok's pod-complete stage changed shape; cannot keep startedAt" >&2; exit 1; }
  mv "$B/kwok-stages.yaml.tmp" "$B/kwok-stages.yaml"
fi
trim_caches
echo "$B"
