#!/usr/bin/env bash
# Unpacks one Debian bookworm package into the cache, without root and without touching the machine's apt
# state or installing anything: a private apt configuration (its lists and archives under the cache) downloads
# the .deb, `dpkg-deb -x` unpacks it. Used for promtool (the `prometheus` package) by tests/tests/monitoring.rs.
#
# Usage: unpack-debian-package.sh PACKAGE     prints the unpacked root (CACHE/PACKAGE/root) on its last line
# Env:   GPU_ADMISSION_CACHE                  cache folder (default ~/.cache/gpu-admission)
set -euo pipefail
pkg=${1:?usage: unpack-debian-package.sh PACKAGE}
cache=${GPU_ADMISSION_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-admission}
root=$cache/$pkg/root
if [[ -f $cache/$pkg/unpacked ]]; then echo "$root"; exit 0; fi
apt_dir=$cache/apt
apt_opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt_dir/sources"
  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o "Dir::Cache::Archives=$apt_dir/cache/archives"
  -o Debug::NoLocking=1 -o APT::Sandbox::User="$(id -un)")
if [[ ! -f $apt_dir/updated ]]; then
  mkdir -p "$apt_dir/sources" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  sources=/etc/apt/sources.list.d/debian.sources
  if [[ -f $sources ]] && grep -q 'bookworm' "$sources"; then
    # The machine's own mirror, bookworm's entries only.
    awk -v RS= -v ORS='\n\n' '/Suites:[^\n]*bookworm( |$|\n)/' "$sources" >"$apt_dir/sources/bin.sources"
  else
    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      >"$apt_dir/sources/bin.sources"
  fi
  apt-get "${apt_opts[@]}" update -qq >/dev/null
  touch "$apt_dir/updated"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get "${apt_opts[@]}" download "$pkg" >/dev/null)
rm -rf "$root" && mkdir -p "$root"
dpkg-deb -x "$tmp"/"$pkg"_*.deb "$root"
touch "$cache/$pkg/unpacked"
echo "$root"
