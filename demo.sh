#!/usr/bin/env bash
# The local demo: builds the scorer, the webhook frontend and loadgen, starts both services on loopback with a
# freshly generated CA (no cluster needed), admits a set of real-looking Pods over HTTPS as the kube-apiserver
# would, and prints one line per decision. Extra arguments go to `loadgen demo` (see `--help`).
set -euo pipefail
cd "$(dirname "$0")"
cargo build --locked --quiet -p scorer -p webhook-frontend -p loadgen
exec target/debug/loadgen demo "$@"
