#!/usr/bin/env bash
# Instructions per admission of the frontend and the scorer, counted by callgrind: unlike a rate, the count
# barely moves from run to run whatever else the machine does (the decisions' code not at all; the runtime's
# and HTTP/2's part by ~1-2k instructions, under 1 %), so two builds can be compared on a noisy host.
# Usage: loadgen/scripts/instructions-per-admission.sh BIN_DIR [N]
#   BIN_DIR holds optimised builds of `scorer`, `webhook-frontend` and `loadgen` (the `measure` profile:
#   `cargo build --profile measure -p scorer -p webhook-frontend -p loadgen`; counts compare only within one
#   profile). N admissions are counted (default 2000) after 200 warm-up admissions, and the same body sent the
#   same way to the do-nothing TLS endpoint (`loadgen baseline-server`) gives the baseline and the ratios.
#   Needs valgrind and h2load (Debian: valgrind, nghttp2-client).
#   WEBHOOK_PATH=/validate-pod counts that webhook instead of /mutate-pod (the same Pod review).
#   BODY=FILE counts another review (default: tests/fixtures/admissionreviews/v1-pod-create-nvidia.json, a bare
#   Pod: every admission asks the scorer).
#   WORKLOAD_BODY=FILE is counted next, against the same processes (default: v1-pod-create-job-member.json, a
#   Job's Pod: after the workload's first Pod the frontend reuses the scorer's answer, so it is the cost of the
#   other Pods of a Job, JobSet, Deployment...); WORKLOAD_BODY= (empty) counts BODY only.
#   KEEP=DIR keeps the callgrind outputs there (for callgrind_annotate).
#   Prints `name: N instructions per admission` lines and a final `ratio` line; with SUMMARY=FILE also writes
#   them as `key=value` lines (frontend, scorer, baseline) for scripts.
set -euo pipefail
bin=$(realpath "$1")
n=${2:-2000}
path=${WEBHOOK_PATH:-/mutate-pod}
fixtures=$(dirname "$0")/../../tests/fixtures/admissionreviews
body=$(realpath "${BODY:-$fixtures/v1-pod-create-nvidia.json}")
workload_body=${WORKLOAD_BODY-$fixtures/v1-pod-create-job-member.json}
[ -z "$workload_body" ] || workload_body=$(realpath "$workload_body")
out=${KEEP:-$(mktemp -d)}
mkdir -p "$out"
scorer_port=50171 webhook_port=8471 baseline_port=8472 # and 8473, 8474
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$out"
}
pids=()
trap cleanup EXIT

wait_for() { for _ in $(seq 120); do grep -q "$2" "$1" && return 0; sleep 1; done; echo "timed out waiting for '$2' in $1" >&2; cat "$1" >&2; exit 1; }

valgrind --tool=callgrind --callgrind-out-file="$out/scorer.cg" \
  "$bin/scorer" --listen "127.0.0.1:$scorer_port" --admin-listen 127.0.0.1:0 >"$out/scorer.log" 2>&1 &
pids+=($!)
wait_for "$out/scorer.log" "listening on"
valgrind --tool=callgrind --callgrind-out-file="$out/frontend.cg" \
  "$bin/webhook-frontend" --listen "127.0.0.1:$webhook_port" --scorer "http://127.0.0.1:$scorer_port" \
  --tls=self-signed --tls-dir "$out/tls" --admin-listen 127.0.0.1:0 --no-kube --namespace-tier ml-research=gold \
  --deadline-ms 5000 >"$out/frontend.log" 2>&1 &
pids+=($!)
# Three baseline processes: one process's count moves by ~2.5 % from another's (where its allocations land),
# so the baseline is the median of three, and a guard scaled by it does not move with one process's luck.
for b in 0 1 2; do
  valgrind --tool=callgrind --callgrind-out-file="$out/baseline$b.cg" \
    "$bin/loadgen" baseline-server --listen "127.0.0.1:$((baseline_port + b))" --self-signed "$out/tls-baseline$b" \
    >"$out/baseline$b.log" 2>&1 &
  pids+=($!)
done
wait_for "$out/frontend.log" "policy loaded"
for b in 0 1 2; do wait_for "$out/baseline$b.log" "listening on"; done

load() {
  h2load -n "$1" -c 1 -m 4 -d "$4" -H 'content-type: application/json' "https://localhost:$2$3"
}
# Counts the processes' instructions over N admissions of BODY sent to PORT: zero, load, dump.
count() {
  local port=$1 file=$2 p
  shift 2
  load 200 "$port" "$path" "$file" >/dev/null
  for p in "$@"; do callgrind_control -z "$p" >/dev/null; done
  load "$n" "$port" "$path" "$file" | grep -E "^requests:|^status codes:"
  for p in "$@"; do callgrind_control -d "$p" >/dev/null; done
}
# The frontend can answer without the scorer while its channel to it comes up (seen under valgrind: every one of
# the 200 warm-up admissions, in 2 counts of 4), and the scorer's first Score builds its posterior (≈ 40 M
# instructions in the dev profile): that one-time work then fell in the window (+145,000 per admission).
# Warm up until the frontend's metrics show a Score answered.
warm_scorer() {
  local admin
  for _ in $(seq 60); do
    # Logged once the admin server is up, which may be after "policy loaded".
    admin=$(sed -n 's/.*admin server (metrics) listening on \([0-9.:]*\).*/\1/p' "$out/frontend.log" | head -1)
    if [[ -n $admin ]] && curl -fsS "http://$admin/metrics" | grep -q '^gpu_admission_scorer_calls_total{result="ok"}'; then
      return 0
    fi
    load 20 "$webhook_port" "$path" "$body" >/dev/null
    sleep 1
  done
  echo "the frontend never reached the scorer (http://$admin/metrics)" >&2
  exit 1
}
warm_scorer
count "$webhook_port" "$body" "${pids[0]}" "${pids[1]}"
for b in 0 1 2; do count "$((baseline_port + b))" "$body" "${pids[$((2 + b))]}"; done
[ -z "$workload_body" ] || count "$webhook_port" "$workload_body" "${pids[0]}" "${pids[1]}"
sleep 1
declare -A per
# Dump K after zeroing (`NAME.cg.K`) holds the K-th counted run only.
per_admission() {
  local total
  total=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out/$1.cg.$2" | head -1)
  per[$3]=$((total / n))
  echo "$3: ${per[$3]} instructions per admission ($total / $n) on $path"
}
per_admission frontend 1 frontend
per_admission scorer 1 scorer
for b in 0 1 2; do per_admission "baseline$b" 1 "baseline$b"; done
per[baseline]=$(printf '%s\n' "${per[baseline0]}" "${per[baseline1]}" "${per[baseline2]}" | sort -n | sed -n 2p)
echo "baseline: ${per[baseline]} instructions per request (the median of three processes)"
echo "pass-throughs (must be 0): $(grep -c "pass-through" "$out/frontend.log" || true)"
ratio() {
  awk -v f="$2" -v s="$3" -v b="${per[baseline]}" -v what="$1" 'BEGIN {
    printf "ratio to the baseline (%s): frontend %.2fx, frontend + scorer %.2fx\n", what, f / b, (f + s) / b }'
}
ratio "$(basename "$body")" "${per[frontend]}" "${per[scorer]}"
if [ -n "$workload_body" ]; then
  per_admission frontend 2 workload_frontend
  per_admission scorer 2 workload_scorer
  ratio "$(basename "$workload_body"), the workload's answer reused" "${per[workload_frontend]}" "${per[workload_scorer]}"
fi
if [ -n "${SUMMARY:-}" ]; then
  printf 'frontend=%s\nscorer=%s\nbaseline=%s\n' "${per[frontend]}" "${per[scorer]}" "${per[baseline]}" >"$SUMMARY"
  [ -z "$workload_body" ] ||
    printf 'workload_frontend=%s\nworkload_scorer=%s\n' "${per[workload_frontend]}" "${per[workload_scorer]}" >>"$SUMMARY"
fi
