#!/usr/bin/env bash
# Starts a throwaway control plane on loopback for the real-cluster test tier: etcd + kube-apiserver v1.20.2
# (no scheduler, no controller-manager: Pods stay Pending, which is all admission tests need).
#
# Usage: start-apiserver.sh RUN_DIR [APISERVER_PORT ETCD_CLIENT_PORT ETCD_PEER_PORT]
#   Ports default to free ones chosen by the OS (via python3). Give them explicitly when python3 is missing.
# Env:   KUBE_APISERVER   the kube-apiserver binary (default: the last line of build-apiserver.sh)
#        ETCD             the etcd binary (default: beside kube-apiserver, else etcd on PATH)
#        STARTUP_TIMEOUT  seconds to wait for /readyz (default 90)
# Writes into RUN_DIR: kubeconfig (admin token, system:masters), ca.crt, apiserver.log, etcd.log, *.pid, and
# env (APISERVER_PORT=..., ETCD_PORT=..., KUBECONFIG=...). Prints "ready: KUBECONFIG=RUN_DIR/kubeconfig".
# Stop with stop-apiserver.sh RUN_DIR. On failure, what was started is stopped and the log tail is shown.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
R=${1:?usage: start-apiserver.sh RUN_DIR [APISERVER_PORT ETCD_CLIENT_PORT ETCD_PEER_PORT]}
free_ports() {
  python3 -c 'import socket
socks = [socket.socket() for _ in range(3)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))'
}
if [[ $# -ge 4 ]]; then P=$2; E=$3; EP=$4; else read -r P E EP < <(free_ports); fi
BIN=${KUBE_APISERVER:-$("$here/build-apiserver.sh" | tail -n 1)}
[[ -x $BIN ]] || { echo "kube-apiserver not found: $BIN" >&2; exit 1; }
# etcd: $ETCD, else the one build-apiserver.sh unpacked beside kube-apiserver, else one on PATH.
ETCD=${ETCD:-$(dirname "$BIN")/etcd}
[[ -x $ETCD ]] || ETCD=$(command -v etcd) || { echo "etcd not found: run build-apiserver.sh" >&2; exit 1; }
for tool in openssl curl; do command -v $tool >/dev/null || { echo "$tool not found (apt-get install $tool)" >&2; exit 1; }; done

mkdir -p "$R" && cd "$R" && R=$(pwd)
fail() {
  echo "start-apiserver: $*" >&2
  for f in etcd.log apiserver.log; do [[ -f $f ]] && { echo "----- tail of $R/$f" >&2; tail -n 25 "$f" >&2; }; done
  "$here/stop-apiserver.sh" "$R" || true
  exit 1
}

# A CA, the apiserver's serving certificate (127.0.0.1, localhost), the service-account key pair, a token.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=e2e-apiserver-ca -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout apiserver.key -out apiserver.csr 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > san.ext
openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile san.ext \
  -out apiserver.crt 2>/dev/null
openssl genrsa -out sa.key 2048 2>/dev/null && openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
tok=$(openssl rand -hex 16)
echo "$tok,admin,admin,system:masters" > tokens.csv

"$ETCD" --name e2e --data-dir "$R/etcd" \
  --listen-client-urls "http://127.0.0.1:$E" --advertise-client-urls "http://127.0.0.1:$E" \
  --listen-peer-urls "http://127.0.0.1:$EP" --initial-advertise-peer-urls "http://127.0.0.1:$EP" \
  --initial-cluster "e2e=http://127.0.0.1:$EP" >etcd.log 2>&1 &
echo $! > etcd.pid

"$BIN" --etcd-servers="http://127.0.0.1:$E" --bind-address=127.0.0.1 --advertise-address=127.0.0.1 \
  --secure-port="$P" --tls-cert-file=apiserver.crt --tls-private-key-file=apiserver.key --client-ca-file=ca.crt \
  --service-account-issuer=https://kubernetes.default.svc --service-account-key-file=sa.pub \
  --service-account-signing-key-file=sa.key --token-auth-file=tokens.csv --authorization-mode=RBAC \
  --service-cluster-ip-range=10.96.0.0/24 --disable-admission-plugins=ServiceAccount \
  --allow-privileged=true --profiling=false >apiserver.log 2>&1 &
echo $! > apiserver.pid

cat > kubeconfig <<K
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "https://127.0.0.1:$P", certificate-authority: "$R/ca.crt"}}]
users: [{name: admin, user: {token: "$tok"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: admin}}]
current-context: e2e
K
printf 'APISERVER_PORT=%s\nETCD_PORT=%s\nETCD_PEER_PORT=%s\nKUBECONFIG=%s\n' "$P" "$E" "$EP" "$R/kubeconfig" > env

deadline=$((SECONDS + ${STARTUP_TIMEOUT:-90}))
while (( SECONDS < deadline )); do
  kill -0 "$(cat etcd.pid)" 2>/dev/null || fail "etcd exited"
  kill -0 "$(cat apiserver.pid)" 2>/dev/null || fail "kube-apiserver exited"
  if curl -fsS --max-time 2 --cacert ca.crt -H "Authorization: Bearer $tok" "https://127.0.0.1:$P/readyz" >/dev/null 2>&1; then
    echo "ready: KUBECONFIG=$R/kubeconfig"
    exit 0
  fi
  sleep 0.5
done
fail "kube-apiserver not ready after ${STARTUP_TIMEOUT:-90}s"
