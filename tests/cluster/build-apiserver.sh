#!/usr/bin/env bash
# Builds a real kube-apiserver (v1.20.2) from Debian bookworm's `kubernetes` source package and unpacks etcd
# from Debian's `etcd-server` package, both into a cache folder outside the clone, kept across runs.
#
# Usage: build-apiserver.sh            prints the kube-apiserver path on its last line; etcd lies beside it
# Env:   GPU_ADMISSION_CACHE           cache folder (default ~/.cache/gpu-admission)
# Takes about 5-6 minutes on 2 cores when cold, nothing when cached. Each piece is made only when missing.
#
# What stays in the cache (no root needed): the Debian package lists it uses, the kubernetes sources, the Go
# build cache, the kube-apiserver binary and the etcd binary (unpacked from the .deb with `dpkg-deb -x`, so no
# system etcd service is installed or started).
# What is installed system-wide, only when missing and only to build kube-apiserver (with apt-get, as root or
# through sudo): golang-go (the Go compiler), make and rsync (the kubernetes build scripts), and
# golang-github-modern-go-reflect2-dev (a Go source fix, see below).
set -euo pipefail
cache=${GPU_ADMISSION_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-admission}
bin=$cache/kube-apiserver-v1.20.2/kube-apiserver
etcd=$cache/kube-apiserver-v1.20.2/etcd
work=$cache/kube-apiserver-build
apt_dir=$cache/apt

if [[ -x $bin && -x $etcd ]]; then echo "$bin"; exit 0; fi
mkdir -p "$(dirname "$bin")"

# A private apt configuration (lists and cache in $apt_dir) for Debian bookworm, binaries and sources, so that
# downloading works without root and without touching the machine's own apt state.
apt_opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt_dir/sources"
  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o "Dir::Cache::Archives=$apt_dir/cache/archives"
  -o Debug::NoLocking=1
  -o APT::Sandbox::User="$(id -un)")
private_apt_update() {
  [[ -f $apt_dir/updated ]] && return
  mkdir -p "$apt_dir/sources" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  local sources=/etc/apt/sources.list.d/debian.sources
  if [[ -f $sources ]] && grep -q 'bookworm' "$sources"; then
    awk -v RS= -v ORS='\n\n' '/Suites:[^\n]*bookworm( |$|\n)/' "$sources" > "$apt_dir/sources/bin.sources"
    sed 's/^Types: deb$/Types: deb-src/' "$apt_dir/sources/bin.sources" > "$apt_dir/sources/src.sources"
  else
    for t in deb deb-src; do
      printf 'Types: %s\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "$t" > "$apt_dir/sources/$t.sources"
    done
  fi
  apt-get "${apt_opts[@]}" update -qq >/dev/null
  touch "$apt_dir/updated"
}

if [[ ! -x $etcd ]]; then
  echo "build-apiserver: unpacking etcd from Debian's etcd-server package into $cache" >&2
  private_apt_update
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get "${apt_opts[@]}" download etcd-server >/dev/null && dpkg-deb -x etcd-server_*.deb root)
  cp "$tmp/root/usr/bin/etcd" "$etcd.tmp" && mv "$etcd.tmp" "$etcd"
  rm -rf "$tmp"
fi

if [[ ! -x $bin ]]; then
  needed=(golang-go make rsync golang-github-modern-go-reflect2-dev)
  missing=()
  for p in "${needed[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
  if [[ ${#missing[@]} -gt 0 ]]; then
    echo "build-apiserver: installing system-wide to build kube-apiserver: ${missing[*]}" >&2
    if [[ $(id -u) -eq 0 ]]; then sudo=(); elif command -v sudo >/dev/null; then sudo=(sudo); else
      echo "build-apiserver: not root and no sudo; run as root first:" >&2
      echo "  apt-get install -y --no-install-recommends ${missing[*]}" >&2
      exit 1
    fi
    "${sudo[@]}" apt-get update -qq >/dev/null
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  echo "build-apiserver: building kube-apiserver v1.20.2 from source into $cache (about 6 minutes)" >&2
  private_apt_update
  rm -rf "$work" && mkdir -p "$work/src"
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
