#!/usr/bin/env bash
# The local demo: builds the scorer, the webhook frontend and loadgen, starts both services on loopback with a
# freshly generated CA (no cluster needed), admits a set of real-looking Pods over HTTPS as the kube-apiserver
# would, and prints one line per decision. Extra arguments go to `loadgen demo` (see `--help`); e.g.
# `--work-dir DIR` keeps the logs and the CA, which are otherwise removed at the end.
#
# The binaries land wherever cargo puts them (CARGO_TARGET_DIR, build.target-dir): `cargo metadata` says where,
# and `loadgen demo` starts the scorer and the frontend from the folder of its own executable.
set -euo pipefail
cd "$(dirname "$0")"
echo "==> building the workspace binaries (debug; a few minutes the first time)" >&2
# One build of the whole workspace, the selection the test kit builds too. Not `cargo run -p loadgen`: cargo
# unifies dependency features over the packages of each command, so a narrower selection rebuilds them.
cargo build --locked --workspace --bins
target_dir=$(cargo metadata --locked --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
exec "$target_dir/debug/loadgen" demo "$@"
