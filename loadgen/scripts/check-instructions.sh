#!/usr/bin/env bash
# CI's cost guard: counts the instructions per `/mutate-pod` admission of the frontend and the scorer
# (instructions-per-admission.sh, callgrind) and fails when frontend + scorer rise more than 5 % above the
# committed reference (loadgen/instructions-reference.txt). A counted benchmark, not a timed test: the count is
# the same within ~0.1-1 % from run to run whatever else the machine does.
#
# It counts the binaries CI has already built (the dev profile: no second optimised build in CI), so the
# reference is a dev-profile count and compares only with dev-profile counts; the optimised numbers
# (`measure` profile) are in docs/measurements/2026-11-25-instructions-per-admission.md. A change that
# makes an admission dearer on purpose updates the reference in the same commit:
# `UPDATE=1 loadgen/scripts/check-instructions.sh target/debug`.
#
# Usage: loadgen/scripts/check-instructions.sh BIN_DIR [N]   (default N 300)
# Installs valgrind and h2load (Debian: valgrind, nghttp2-client) when missing, as root or through sudo.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$1
n=${2:-300}
reference=$here/../instructions-reference.txt
tolerance_percent=5

missing=()
command -v valgrind >/dev/null || missing+=(valgrind)
command -v h2load >/dev/null || missing+=(nghttp2-client)
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then sudo=(); elif command -v sudo >/dev/null; then sudo=(sudo); else
    echo "check-instructions: not root and no sudo; install first: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "installing ${missing[*]} (apt-get)"
  "${sudo[@]}" apt-get update -qq >/dev/null
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
# The bare Pod only (every admission asks the scorer): the dearer path, and the one the reference holds.
measure() {
  WORKLOAD_BODY= SUMMARY=$summary "$here/instructions-per-admission.sh" "$bin" "$n" | grep -v '^sending command'
  # shellcheck disable=SC1090
  source "$summary"
  now=$((frontend + scorer))
}
measure
total=$(sed -n 's/^total=//p' "$reference")
reference_baseline=$(sed -n 's/^baseline=//p' "$reference")
limit=$((total + total * tolerance_percent / 100))
# A count over the limit is taken once more and the lower one judged: a background task of a process lands in
# one counting window, not in two; a real regression shows in both. (The scorer's ≈ 150,000 instructions per
# admission seen in about 2 counts of 5 were its first posterior falling in the window when the warm-up had not
# reached it: instructions-per-admission.sh now warms up until a Score is answered.)
if [[ -z ${UPDATE:-} ]] && ((now * reference_baseline / baseline > limit)); then
  first=$now
  echo "over the limit ($first): counting once more"
  measure
  if ((first < now)); then now=$first; fi
fi
if [[ -n ${UPDATE:-} ]]; then
  {
    echo "# Instructions per /mutate-pod admission, frontend + scorer, dev profile (target/debug), counted by"
    echo "# loadgen/scripts/check-instructions.sh; CI fails above this + ${tolerance_percent} %. Updated on purpose only."
    echo "frontend=$frontend"
    echo "scorer=$scorer"
    echo "total=$now"
    echo "baseline=$baseline"
  } >"$reference"
  echo "reference updated: $reference (frontend + scorer $now)"
  exit 0
fi
# Scaled by the do-nothing endpoint's count on this machine: a CPU whose TLS or memcpy code paths differ from
# the reference machine's moves both counts alike, and does not fail the check.
scaled=$((now * reference_baseline / baseline))
echo "frontend + scorer: $now instructions per admission ($scaled at the reference's baseline of" \
  "$reference_baseline, here $baseline); reference $total, limit $limit (+${tolerance_percent} %)"
if ((scaled > limit)); then
  echo "check-instructions: an admission costs $(( (scaled - total) * 100 / total )) % more than the reference." >&2
  echo "  If that is meant, update the reference in the same commit:" >&2
  echo "  UPDATE=1 loadgen/scripts/check-instructions.sh $bin" >&2
  exit 1
fi
