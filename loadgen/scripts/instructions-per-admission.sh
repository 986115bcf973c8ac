#!/usr/bin/env bash
# Instructions per admission of the frontend and the scorer, counted by callgrind: unlike a rate, the count is
# the same from run to run (±0.1 %) whatever else the machine does, so two builds can be compared on a noisy
# host. Usage: loadgen/scripts/instructions-per-admission.sh BIN_DIR [N]
#   BIN_DIR holds release builds of `scorer` and `webhook-frontend`; N admissions are counted (default 2000)
#   after 200 warm-up admissions. Needs valgrind and h2load (Debian: valgrind, nghttp2-client).
#   WEBHOOK_PATH=/validate-pod counts that webhook instead of /mutate-pod (the same Pod review).
set -euo pipefail
bin=$(realpath "$1")
n=${2:-2000}
path=${WEBHOOK_PATH:-/mutate-pod}
body=$(realpath "$(dirname "$0")/../../tests/fixtures/admissionreviews/v1-pod-create-nvidia.json")
out=$(mktemp -d)
scorer_port=50171 webhook_port=8471
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
pids=()
trap cleanup EXIT

valgrind --tool=callgrind --callgrind-out-file="$out/scorer.cg" \
  "$bin/scorer" --listen "127.0.0.1:$scorer_port" --admin-listen 127.0.0.1:0 >"$out/scorer.log" 2>&1 &
pids+=($!)
for _ in $(seq 60); do grep -q "listening on" "$out/scorer.log" && break; sleep 1; done
valgrind --tool=callgrind --callgrind-out-file="$out/frontend.cg" \
  "$bin/webhook-frontend" --listen "127.0.0.1:$webhook_port" --scorer "http://127.0.0.1:$scorer_port" \
  --self-signed "$out/tls" --admin-listen 127.0.0.1:0 --no-kube --namespace-tier ml-research=gold \
  --deadline-ms 5000 >"$out/frontend.log" 2>&1 &
pids+=($!)
for _ in $(seq 60); do grep -q "scorer policy loaded" "$out/frontend.log" && break; sleep 1; done

load() {
  h2load -n "$1" -c 1 -m 4 -d "$body" -H 'content-type: application/json' \
    "https://localhost:$webhook_port$path"
}
load 200 >/dev/null
for p in "${pids[@]}"; do callgrind_control -z "$p" >/dev/null; done
load "$n" | grep -E "^requests:|^status codes:"
for p in "${pids[@]}"; do callgrind_control -d "$p" >/dev/null; done
sleep 1
for name in frontend scorer; do
  # The dump after zeroing (`NAME.cg.1`) holds the counted admissions only.
  total=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out/$name.cg.1" | head -1)
  echo "$name: $((total / n)) instructions per admission ($total / $n) on $path"
done
echo "pass-throughs (must be 0): $(grep -c "pass-through" "$out/frontend.log" || true)"
rm -rf "$out"
