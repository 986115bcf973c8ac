#!/usr/bin/env bash
# The local demo: builds the scorer, the webhook frontend and loadgen, starts both services on loopback with a
# freshly generated CA (no cluster needed), admits a set of real-looking Pods over HTTPS as the kube-apiserver
# would, and prints one line per decision. Extra arguments go to `loadgen demo` (see `--help`); e.g.
# `--work-dir DIR` keeps the logs and the CA, which are otherwise removed at the end.
#
# The binaries land wherever cargo puts them (CARGO_TARGET_DIR, build.target-dir): `cargo run` finds them, and
# `loadgen demo` starts the scorer and the frontend from the folder of its own executable.
set -euo pipefail
cd "$(dirname "$0")"
echo "==> building scorer, webhook-frontend and loadgen (debug; a few minutes the first time)" >&2
cargo build --locked -p scorer -p webhook-frontend -p loadgen
exec cargo run --locked --quiet -p loadgen -- demo "$@"
