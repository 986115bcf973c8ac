#!/usr/bin/env bash
# Instructions the scorer spends per Score call and per Observe call, counted by callgrind while `loadgen
# learn` drives it: one truth, one seed, DECISIONS jobs, each scored and (8 decisions later) observed over
# gRPC by the real scorer process. Counted inclusively at `scorer::service::Core::score` and
# `scorer::service::Core::observe` (request validation, the model, the proto response; not HTTP/2, protobuf
# decoding or the tracing span), so two commits compare at the same boundaries on a noisy host.
#
# Usage: loadgen/scripts/score-observe-instructions.sh BIN_DIR OUT_DIR [DECISIONS] [TRUTH] [SEED]
#   BIN_DIR holds release builds of `scorer` and `loadgen` with line tables (the workspace's release profile
#   has them): `cargo build --release -p scorer -p loadgen`. DECISIONS defaults to 400, TRUTH to `cluster`,
#   SEED to 3. Needs valgrind, perl and jq.
#   OUT_DIR receives, per scorer (1 = the learning one, 2 = the prior-only one loadgen runs next to it):
#   scorer-N.cg (callgrind), scorer-N.log, state-N.json (its learned state, written at shutdown), and
#   loadgen.txt (loadgen's report).
#   ONLY=PATTERN collects only inside functions matching PATTERN (callgrind --toggle-collect, e.g.
#   ONLY='scorer::service::Core::score'): for `callgrind_annotate --inclusive=yes` of what a call spends.
#
# How: loadgen starts `scorer` from --bin-dir; here that is a wrapper that starts the real scorer under
# callgrind in the background, so the scorer outlives loadgen's SIGKILL of the wrapper at the end of the run
# and is stopped with SIGTERM (callgrind writes its output, the scorer its state).
set -euo pipefail
bin=$(realpath "$1")
mkdir -p "$2"
out=$(realpath "$2")
decisions=${3:-400}
truth=${4:-cluster}
seed=${5:-3}
score_fn='scorer::service::Core::score'
observe_fn='scorer::service::Core::observe'

wrap=$(mktemp -d)
# SIGTERM to every scorer still running: callgrind writes its output when the scorer exits.
stop_scorers() {
  local f pid
  for f in "$out"/scorer-*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then echo "scorer $pid did not exit within 120 s" >&2; return 1; fi
    rm -f "$f"
  done
}
trap 'stop_scorers || true; rm -rf "$wrap"' EXIT
rm -rf "$out"/scorer-*.cg* "$out"/scorer-*.pid "$out"/state-*.json "$out/work"
collect=()
[ -z "${ONLY:-}" ] || collect=("--toggle-collect=$ONLY")
# An older scorer (before --policy-file) reads the policy from --policy: the same file, the flag renamed.
policy_flag=--policy-file
"$bin/scorer" --help | grep -q -- --policy-file || policy_flag=--policy
cat >"$wrap/scorer" <<EOF
#!/usr/bin/env bash
# Started in turn (loadgen waits for each to listen): the count of pid files is this scorer's number.
n=\$((\$(ls "$out" | grep -c '^scorer-.*\.pid$' || true) + 1))
args=("\${@/#--policy-file/$policy_flag}")
SCORER_STATE="$out/state-\$n.json" SCORER_SNAPSHOT_INTERVAL_SECS=86400 \
  valgrind --tool=callgrind ${collect[*]} --callgrind-out-file="$out/scorer-\$n.cg" "$bin/scorer" "\${args[@]}" &
echo \$! >"$out/scorer-\$n.pid"
wait
EOF
chmod +x "$wrap/scorer"

"$bin/loadgen" learn --bin-dir "$wrap" --work-dir "$out/work" --truth "$truth" --seed "$seed" \
  --decisions "$decisions" >"$out/loadgen.txt"
head -1 "$out/loadgen.txt"

stop_scorers
for n in 1 2; do cp "$out/work/"*"/scorer-$([ $n = 1 ] && echo learning || echo prior-only).log" "$out/scorer-$n.log"; done

# Calls of a function and their inclusive instructions: the sums over the call arcs into it (a `cfn=` naming
# it, its `calls=N` line, then the arc's cost line; the first mention of a compressed name carries it). The
# same inclusive count `callgrind_annotate --inclusive=yes` prints for the function's `[object]` line.
calls() {
  perl -ne 'BEGIN { $want = shift @ARGV }
    if (/^(c?)fn=\((\d+)\)(?: (.*))?$/) { $name{$2} = $3 if defined $3; $target = $1 ? $name{$2} : ""; next }
    if (/^calls=(\d+)/) { if ($target eq $want) { $n += $1; $take = 1 } $target = ""; next }
    if ($take) { @f = split; $ir += $f[-1]; $take = 0 }
    END { printf "%d %d\n", $n, $ir }' "$2" "$1"
}
for n in 1 2; do
  cg="$out/scorer-$n.cg"
  total=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$cg")
  echo "scorer-$n ($([ $n = 1 ] && echo learning || echo prior-only)): $total instructions in all"
  for fn in "$score_fn" "$observe_fn"; do
    read -r c i < <(calls "$cg" "$fn")
    if [ "$c" -gt 0 ]; then
      echo "  $fn: $c calls, $i instructions inclusive, $((i / c)) per call"
    else
      echo "  $fn: 0 calls"
    fi
  done
done
# The learning scorer's state at the end (gzip JSON, what ExportState sends and the observer stores): pairs are
# the undirected table's entries plus the directed table's (pairs across owners).
state="$out/state-1.json"
if [ -s "$state" ]; then
  zcat "$state" | jq -r --arg bytes "$(stat -c %s "$state")" '.learned | "learning scorer'"'"'s state at the end: \(.observations) observations, \(.runtimes.by_job | length) job types (\([.runtimes.by_job[] | length] | add // 0) job type × class cells), \([.interference.pairs[]?, .interference.directed[]? | length] | add // 0) co-located pairs (\([.interference.directed[]? | length] | add // 0) of them directed), \($bytes) bytes"'
fi
