#!/usr/bin/env bash
# Stops what start-apiserver.sh started in RUN_DIR (by the pids it wrote): SIGTERM, then SIGKILL after 5 s.
# Usage: stop-apiserver.sh RUN_DIR
R=${1:?usage: stop-apiserver.sh RUN_DIR}
pids=()
for p in apiserver etcd; do
  if [[ -f $R/$p.pid ]]; then
    pid=$(cat "$R/$p.pid")
    kill "$pid" 2>/dev/null && pids+=("$pid")
    rm -f "$R/$p.pid"
  fi
done
for _ in $(seq 1 50); do
  alive=0
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
  (( alive )) || exit 0
  sleep 0.1
done
for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
exit 0
