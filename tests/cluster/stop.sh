#!/usr/bin/env bash
# Stops what start.sh started in RUN_DIR (by the pids it wrote), the clients before the apiserver and etcd:
# SIGTERM, then SIGKILL after 5 s.
# Usage: stop.sh RUN_DIR
R=${1:?usage: stop.sh RUN_DIR}
stop() {
  local pids=() p pid
  for p in "$@"; do
    [[ -f $R/$p.pid ]] || continue
    pid=$(cat "$R/$p.pid")
    kill "$pid" 2>/dev/null && pids+=("$pid")
    rm -f "$R/$p.pid"
  done
  for _ in $(seq 1 50); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive)) || return 0
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
}
stop kwok scheduler controller-manager
stop apiserver
stop etcd
exit 0
