#!/usr/bin/env bash
# Builds a real kube-apiserver (v1.20.2) from Debian bookworm's `kubernetes` source package and installs
# etcd, using nothing but Debian's packages. The binary is cached outside the clone and kept across runs.
#
# Usage: build-apiserver.sh            prints the kube-apiserver path on its last line
# Env:   GPU_ADMISSION_CACHE           cache folder (default ~/.cache/gpu-admission)
# Takes about 5-6 minutes on 2 cores when cold, nothing when cached.
set -euo pipefail
cache=${GPU_ADMISSION_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-admission}
bin=$cache/kube-apiserver-v1.20.2/kube-apiserver
work=$cache/kube-apiserver-build

sudo_if_needed() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

if [[ -x $bin ]] && command -v etcd >/dev/null; then echo "$bin"; exit 0; fi

sudo_if_needed apt-get update -qq >/dev/null
sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  golang-go rsync make golang-github-modern-go-reflect2-dev etcd-server openssl curl >/dev/null

if [[ ! -x $bin ]]; then
  rm -rf "$work" && mkdir -p "$work/apt/lists/partial" "$work/src" "$(dirname "$bin")"
  # A deb-src entry for the same bookworm archive the machine already uses for binaries.
  sources=/etc/apt/sources.list.d/debian.sources
  if [[ -f $sources ]]; then
    awk -v RS= -v ORS='\n\n' '/Suites:[^\n]*bookworm( |$|\n)/' "$sources" | sed 's/^Types: deb$/Types: deb-src/' > "$work/apt/src.sources"
  fi
  if ! grep -q '^Types: deb-src' "$work/apt/src.sources" 2>/dev/null; then
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' > "$work/apt/src.sources"
  fi
  apt_opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$work/apt" -o "Dir::State::Lists=$work/apt/lists")
  apt-get "${apt_opts[@]}" update -qq >/dev/null
  (cd "$work/src" && apt-get "${apt_opts[@]}" source --download-only kubernetes >/dev/null)
  cd "$work/src" && tar xzf kubernetes_*.orig.tar.gz && cd kubernetes-1.20.2
  # Vendored reflect2 v1.0.1 crashes under Go >= 1.18 on the first webhook call; Debian ships v1.0.2.
  rm -f vendor/github.com/modern-go/reflect2/*.go vendor/github.com/modern-go/reflect2/*.s
  cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.{go,s} vendor/github.com/modern-go/reflect2/
  export KUBE_GIT_VERSION=v1.20.2 KUBE_GIT_TREE_STATE=clean KUBE_GIT_COMMIT=faecb196815e248d3ecfb03c680a4507229c2a56
  export GOFLAGS=-mod=vendor GOCACHE="$work/gocache" GOPATH="$work/gopath"
  make WHAT=cmd/kube-apiserver >/dev/null
  cp _output/bin/kube-apiserver "$bin.tmp" && mv "$bin.tmp" "$bin"
  cd "$cache" && rm -rf "$work"
fi
echo "$bin"
