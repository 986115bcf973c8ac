#!/usr/bin/env bash
# Starts a throwaway control plane on loopback for the real-cluster tier: etcd + kube-apiserver, and on request
# kube-scheduler, kube-controller-manager and kwok (which plays the kubelet of fake Nodes).
#
# Usage: start.sh RUN_DIR [COMPONENT...]    COMPONENT: scheduler, controller-manager, kwok, or all (the three);
#                                           workload-api: scheduling.k8s.io/v1beta1 (Workloads, PodGroups) served
#                                           and the GenericWorkload + DRAWorkloadResourceClaims gates on every
#                                           component (Kubernetes 1.37+, beta, off by default; ignored before)
#   Without components: etcd + kube-apiserver only (nothing schedules or runs Pods; what admission tests need).
# Env:   GPU_ADMISSION_K8S_BIN      a folder holding the binaries (skips build.sh)
#        GPU_ADMISSION_K8S_VERSION  the version build.sh builds or finds (default 1.37.2)
#        STARTUP_TIMEOUT            seconds to wait for each component (default 120)
#        GPU_ADMISSION_CLUSTER_PORTS seven loopback ports (apiserver, etcd client/peer/metrics, scheduler,
#                                   controller-manager, kwok); default: seven the OS hands out
#        STATIC_ADMISSION_DIR       a folder of manifest-based admission policies the apiserver loads at its start:
#                                   DIR/validating and DIR/mutating (`gpu-admission floor render --static DIR`)
# The apiserver: RBAC + Node authorization, the ServiceAccount admission plugin off (no token volumes),
# resource.k8s.io/v1 (DRA) served, `--endpoint-reconciler-type=none` (a loopback advertise address is refused
# by the default reconciler). The controller-manager runs every controller through its own ServiceAccount
# (CSR signing and bootstrap tokens off). kwok manages the Nodes annotated kwok.x-k8s.io/node=fake: Ready with
# heartbeats; their Pods Running, then Succeeded after pod-complete.stage.kwok.x-k8s.io/delay; it does not
# pick up Pods bound before it started.
# The apiserver presents webhook-client.crt (signed by webhook-client-ca.crt) to every webhook it calls
# (--admission-control-config-file), as a cluster that authenticates itself to webhooks does.
# Writes into RUN_DIR: kubeconfig (admin token, system:masters), ca.crt, webhook-client-ca.crt, *.log, *.pid and env (ports,
# KUBECONFIG, K8S_BIN), and scheduler.kubeconfig / controller-manager.kubeconfig: each control-plane component
# with its real identity (client certificates signed by ca.crt: CN system:kube-scheduler,
# system:kube-controller-manager; the bootstrap RBAC roles of those names hold them), so that what they create
# (the scheduler's ResourceClaims, the controllers' Pods) meets admission as in a cluster, never as
# system:masters. kwok plays every fake Node's kubelet with the admin token (one process for all Nodes: no
# per-Node identity to give it). Prints "ready: KUBECONFIG=RUN_DIR/kubeconfig". Stop with stop.sh RUN_DIR; on failure
# what was started is stopped and the log tails are shown.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
R=${1:?usage: start.sh RUN_DIR [scheduler] [controller-manager] [kwok] [all]}
shift
scheduler=0 controllers=0 kwok=0 workload=0
for c in "$@"; do
  case $c in
    workload-api) workload=1 ;;
    scheduler) scheduler=1 ;;
    controller-manager) controllers=1 ;;
    kwok) kwok=1 ;;
    all) scheduler=1 controllers=1 kwok=1 ;;
    *) echo "start.sh: unknown component $c (scheduler, controller-manager, kwok, all, workload-api)" >&2; exit 2 ;;
  esac
done
for tool in openssl python3; do
  command -v $tool >/dev/null || { echo "start.sh: $tool not found (apt-get install $tool)" >&2; exit 1; }
done
B=${GPU_ADMISSION_K8S_BIN:-$("$here/build.sh" | tail -n 1)}
for b in etcd kube-apiserver; do [[ -x $B/$b ]] || { echo "start.sh: $B/$b missing" >&2; exit 1; }; done
timeout=${STARTUP_TIMEOUT:-120}

mkdir -p "$R" && cd "$R" && R=$(pwd)
fail() {
  echo "start.sh: $*" >&2
  for f in *.log; do [[ -f $f ]] && { echo "----- tail of $R/$f" >&2; tail -n 20 "$f" >&2; }; done
  "$here/stop.sh" "$R" || true
  exit 1
}
# Loopback ports: the seven of GPU_ADMISSION_CLUSTER_PORTS (the tests claim them below the ephemeral range,
# where no outgoing connection takes them first), else seven the OS hands out (enough for a cluster by hand).
if [[ -n ${GPU_ADMISSION_CLUSTER_PORTS:-} ]]; then
  read -r P E EP EM SP CP KP <<<"$GPU_ADMISSION_CLUSTER_PORTS"
  [[ -n $KP ]] || fail "GPU_ADMISSION_CLUSTER_PORTS holds fewer than seven ports"
else
  read -r P E EP EM SP CP KP < <(python3 -c 'import socket
socks = [socket.socket() for _ in range(7)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')
fi

# A CA, the apiserver's serving certificate (127.0.0.1, localhost), the service-account key pair, a token.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=e2e-cluster-ca -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout apiserver.key -out apiserver.csr 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >san.ext
openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile san.ext \
  -out apiserver.crt 2>/dev/null
openssl genrsa -out sa.key 2048 2>/dev/null && openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
# The certificate the apiserver presents to every webhook ('*': the default entry of its webhook kubeconfig),
# signed by webhook-client-ca.crt, a CA of its own (a frontend started with --client-ca-file on it answers
# only this apiserver).
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=e2e-webhook-client-ca -keyout webhook-client-ca.key \
  -out webhook-client-ca.crt 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver-webhook-client -keyout webhook-client.key \
  -out webhook-client.csr 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' >client.ext
openssl x509 -req -in webhook-client.csr -CA webhook-client-ca.crt -CAkey webhook-client-ca.key -CAcreateserial \
  -days 2 -extfile client.ext -out webhook-client.crt 2>/dev/null
cat >webhook-client.kubeconfig <<K
apiVersion: v1
kind: Config
users: [{name: "*", user: {client-certificate: "$R/webhook-client.crt", client-key: "$R/webhook-client.key"}}]
K
cat >admission.yaml <<K
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: ValidatingAdmissionWebhook
    configuration: {apiVersion: apiserver.config.k8s.io/v1, kind: WebhookAdmissionConfiguration, kubeConfigFile: "$R/webhook-client.kubeconfig"}
  - name: MutatingAdmissionWebhook
    configuration: {apiVersion: apiserver.config.k8s.io/v1, kind: WebhookAdmissionConfiguration, kubeConfigFile: "$R/webhook-client.kubeconfig"}
K
if [[ -n ${STATIC_ADMISSION_DIR:-} ]]; then
  D=$(cd "$STATIC_ADMISSION_DIR" && pwd)
  cat >>admission.yaml <<K
  - name: ValidatingAdmissionPolicy
    configuration: {apiVersion: apiserver.config.k8s.io/v1, kind: ValidatingAdmissionPolicyConfiguration, staticManifestsDir: "$D/validating"}
  - name: MutatingAdmissionPolicy
    configuration: {apiVersion: apiserver.config.k8s.io/v1, kind: MutatingAdmissionPolicyConfiguration, staticManifestsDir: "$D/mutating"}
K
fi
tok=$(openssl rand -hex 16)
echo "$tok,admin,admin,system:masters" >tokens.csv
cat >kubeconfig <<K
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "https://127.0.0.1:$P", certificate-authority: "$R/ca.crt"}}]
users: [{name: admin, user: {token: "$tok"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: admin}}]
current-context: e2e
K
# A client certificate (CN = the user name) and a kubeconfig for one component.
identity() {
  local file=$1 user=$2
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$user" -keyout "$file.key" -out "$file.csr" 2>/dev/null
  openssl x509 -req -in "$file.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile client.ext \
    -out "$file.crt" 2>/dev/null
  cat >"$file.kubeconfig" <<C
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "https://127.0.0.1:$P", certificate-authority: "$R/ca.crt"}}]
users: [{name: $user, user: {client-certificate: "$R/$file.crt", client-key: "$R/$file.key"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: $user}}]
current-context: e2e
C
}
identity scheduler system:kube-scheduler
identity controller-manager system:kube-controller-manager
printf 'APISERVER_PORT=%s\nETCD_PORT=%s\nKUBECONFIG=%s\nK8S_BIN=%s\n' "$P" "$E" "$R/kubeconfig" "$B" >env

# Runs a component in the background, its pid in NAME.pid and its output in NAME.log.
launch() {
  local name=$1
  shift
  "$@" >"$name.log" 2>&1 &
  echo $! >"$name.pid"
}
# Waits until `$2...` succeeds, failing early when component $1 exits.
wait_for() {
  local name=$1 deadline=$((SECONDS + timeout))
  shift
  while ((SECONDS < deadline)); do
    kill -0 "$(cat "$name.pid")" 2>/dev/null || fail "$name exited"
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.3
  done
  fail "$name not ready after ${timeout}s"
}
api() { curl -fsS --max-time 2 --cacert ca.crt -H "Authorization: Bearer $tok" "https://127.0.0.1:$P$1"; }
healthy() { curl -fsSk --max-time 2 "https://127.0.0.1:$1/healthz"; }

runtime_config=resource.k8s.io/v1=true
gates=()
if ((workload)); then
  help=$("$B/kube-apiserver" --help 2>&1 || true)
  if [[ $help == *'DRAWorkloadResourceClaims=true|false'* ]]; then
    runtime_config+=,scheduling.k8s.io/v1beta1=true
    gates=(--feature-gates=GenericWorkload=true,DRAWorkloadResourceClaims=true)
  else
    echo "start.sh: this Kubernetes has no workload API; workload-api ignored" >&2
  fi
fi

launch etcd "$B/etcd" --name e2e --data-dir "$R/etcd" --unsafe-no-fsync \
  --listen-client-urls "http://127.0.0.1:$E" --advertise-client-urls "http://127.0.0.1:$E" \
  --listen-peer-urls "http://127.0.0.1:$EP" --initial-advertise-peer-urls "http://127.0.0.1:$EP" \
  --initial-cluster "e2e=http://127.0.0.1:$EP" --listen-metrics-urls "http://127.0.0.1:$EM"
launch apiserver "$B/kube-apiserver" --etcd-servers="http://127.0.0.1:$E" --bind-address=127.0.0.1 \
  --advertise-address=127.0.0.1 --secure-port="$P" --endpoint-reconciler-type=none \
  --tls-cert-file=apiserver.crt --tls-private-key-file=apiserver.key --client-ca-file=ca.crt \
  --service-account-issuer=https://kubernetes.default.svc --service-account-key-file=sa.pub \
  --service-account-signing-key-file=sa.key --token-auth-file=tokens.csv --authorization-mode=Node,RBAC \
  --service-cluster-ip-range=10.96.0.0/24 --disable-admission-plugins=ServiceAccount \
  --runtime-config="$runtime_config" --allow-privileged=true --profiling=false \
  --admission-control-config-file=admission.yaml "${gates[@]}"
wait_for apiserver api /readyz

# Each component's own kubeconfig (its API client and its delegated authentication and authorization).
own() { echo "--kubeconfig=$1.kubeconfig" "--authentication-kubeconfig=$1.kubeconfig" "--authorization-kubeconfig=$1.kubeconfig"; }
common=(--leader-elect=false --bind-address=127.0.0.1 --kube-api-qps=200 --kube-api-burst=400 --profiling=false
  "${gates[@]}")
if ((controllers)); then
  launch controller-manager "$B/kube-controller-manager" $(own controller-manager) "${common[@]}" --secure-port="$CP" \
    --use-service-account-credentials=true --service-account-private-key-file=sa.key --root-ca-file=ca.crt \
    --controllers='*,-csrsigning,-csrapproving,-bootstrapsigner,-tokencleaner'
fi
if ((scheduler)); then
  launch scheduler "$B/kube-scheduler" $(own scheduler) "${common[@]}" --secure-port="$SP"
  wait_for scheduler healthy "$SP"
fi
if ((kwok)); then
  [[ -x $B/kwok && -s $B/kwok-stages.yaml ]] || fail "$B/kwok or its stages missing"
  {
    printf 'apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n  enableCRDs: []\n'
    printf '  nodePlayStageParallelism: 16\n  podPlayStageParallelism: 16\n  nodeLeaseParallelism: 16\n'
    cat "$B/kwok-stages.yaml"
  } >kwok.yaml
  launch kwok "$B/kwok" --kubeconfig=kubeconfig -c kwok.yaml \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake --cidr=10.0.0.0/16 --node-ip=127.0.0.1 \
    --server-address="127.0.0.1:$KP"
  wait_for kwok curl -fsS --max-time 2 "http://127.0.0.1:$KP/healthz"
fi
if ((controllers)); then
  wait_for controller-manager healthy "$CP"
  # The controllers act once their ServiceAccounts exist (the job controller's among the last).
  wait_for controller-manager api /api/v1/namespaces/kube-system/serviceaccounts/job-controller
fi
echo "ready: KUBECONFIG=$R/kubeconfig"
