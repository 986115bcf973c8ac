//! Namespace-restricted instances against a real kube-apiserver: the cluster-wide installation
//! (the SHIPPED mutating and validating registrations, URL and CA swapped in; the default policy in Enforce)
//! and a restricted one for `gpu-team` as `deploy/kustomize/overlays/namespaced` installs it: the overlay's
//! ServiceAccount, Role, RoleBinding and Lease applied, its frontend run as that ServiceAccount with
//! `--restrict-to-namespaces gpu-team --no-kube` (its tier read from its Namespace by name), its own scorer
//! (behind a proxy the test can make hang) and policy (exploration off, so its
//! `policy-version` differs), registered by the overlay's own MutatingWebhookConfiguration (URL and CA
//! swapped in; it selects only the namespace and sorts before `gpu-admission`). Requests as the tenant alice.
//!
//! Shows: the team namespace's Pods carry the restricted scorer's decision (its policy version and
//! `decided-by`), another namespace's the cluster-wide one's; the team's H100 pin (bronze) is denied in
//! Enforce; alice's own fake `gpu-admission-ns-lock` Lease in another namespace and a record she wrote on her
//! Pod count for nothing (no registration names the namespace: her Pod is decided by the cluster-wide
//! instance, `decided-by` removed; her H100 pin still denied); the team scorer hung: every team Pod scored by
//! the cluster-wide scorer, the Lease given back after 3 fallbacks and taken again once the scorer answers;
//! the namespace relabelled bronze → platinum: every team Pod admitted inside platinum; the restricted instance
//! killed while Pods are created in a loop: every Pod carries a tier bound, and the namespace is back with
//! the cluster-wide scorer within the Lease duration (15 s); the team's scorer hung for the observer while a
//! team run waits: the other namespace's run is learned within one delivery budget, the team's once its
//! scorer answers. Prints the table and the time it took.

use std::path::Path;
use std::time::{Duration, Instant};

use gpu_admission_core::ns_lock::LEASE_NAME;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::tier_bound::{self, NoNodes};
use gpu_admission_proto::scorer::v1::ExportStateRequest;
use gpu_admission_tests::cluster::{CaseTable, Components, LocalCluster};
use gpu_admission_tests::faults::{FaultProxy, ProxyMode};
use gpu_admission_tests::kwok::{self, POD_COMPLETE_DELAY, POD_COMPLETE_JITTER, wait_for};
use gpu_admission_tests::observer::{Observer, metric_value};
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde::Deserialize as _;
use serde_json::{Value, json};

const USER: &str = "alice";
const CLASS: &str = "gpu.nvidia.com/class";
const TEAM: &str = "gpu-team";
const OTHER: &str = "restricted-other";
const FAKE: &str = "restricted-fake";
/// The observer's own namespace (its Lease).
const SYSTEM_NS: &str = "gpu-admission";
const STATE_DIGEST: &str = "gpu-admission.io/state-digest";

fn repo_file(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel))
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The default policy in Enforce; the team's with exploration off (another version, the same tiers).
fn policies() -> (String, String) {
    let text = repo_file("deploy/kustomize/base/policy/default-policy.yaml");
    assert!(text.contains("  mode: Warn") && text.contains("  explorationCap: 0.2"));
    let cluster = text.replace("  mode: Warn", "  mode: Enforce");
    let team = cluster.replace("  explorationCap: 0.2", "  explorationCap: 0.0");
    (cluster, team)
}

/// `deploy/kustomize/overlays/namespaced`, rendered by kubectl's kustomize.
fn namespaced_overlay() -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kustomize/overlays/namespaced");
    let out = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(&dir)
        .output()
        .expect("kubectl kustomize");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_yaml::Deserializer::from_slice(&out.stdout)
        .map(|d| {
            serde_yaml::from_value::<Value>(serde_yaml::Value::deserialize(d).unwrap()).unwrap()
        })
        .filter(|v| !v.is_null())
        .collect()
}

fn gpu_pod(name: &str, pin: Option<&str>) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "registry.example/train:1",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}});
    if let Some(class) = pin {
        pod["spec"]["nodeSelector"] = json!({CLASS: class});
    }
    pod
}

/// A one-Pod Job of `train-bert` that kwok runs for 2 s (kwok completes only Pods a Job owns).
fn run_job(name: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"annotations": {"app.kubernetes.io/job-type": "train-bert",
                POD_COMPLETE_DELAY: "2s", POD_COMPLETE_JITTER: "2s"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main",
                "image": "registry.example/bert:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
}

/// A scorer's learned state: (observations, digest).
async fn learned(scorer: &Scorer) -> (u64, String) {
    let s = scorer
        .client()
        .await
        .unwrap()
        .export_state(ExportStateRequest {})
        .await
        .unwrap()
        .into_inner();
    (s.observations, s.digest)
}

/// A client acting as alice (impersonation through the admin kubeconfig).
async fn tenant_client(kubeconfig: &Path) -> kube::Client {
    let mut kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    for a in &mut kc.auth_infos {
        if let Some(info) = a.auth_info.as_mut() {
            info.impersonate = Some(USER.into());
        }
    }
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    kube::Client::try_from(config).unwrap()
}

fn annotation<'p>(pod: &'p Pod, key: &str) -> Option<&'p str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restricted_instance_scores_its_namespace_and_the_tier_stays_the_clusters() {
    // The scheduler, the controllers and kwok: the team's Job runs to completion on a fake L4 Node.
    let Some(cluster) = LocalCluster::start_with(Components::ALL)
        .await
        .expect("the local control plane starts")
    else {
        return;
    };
    let client = cluster.client();
    let dir = tempfile::tempdir().unwrap();
    let (cluster_policy, team_policy) = policies();
    let cluster_file = dir.path().join("cluster-policy.yaml");
    let team_file = dir.path().join("team-policy.yaml");
    std::fs::write(&cluster_file, &cluster_policy).unwrap();
    std::fs::write(&team_file, &team_policy).unwrap();
    let snapshot = PolicySnapshot::from_policy(std::sync::Arc::new(
        gpu_admission_policy::parse(&cluster_policy, "cluster-policy.yaml")
            .expect("the policy parses"),
    ));

    let scorer = Scorer::builder()
        .policy(&cluster_file)
        .name("scorer-cluster")
        .start()
        .await
        .expect("cluster scorer");
    let team_scorer = Scorer::builder()
        .policy(&team_file)
        .name("scorer-team")
        .start()
        .await
        .expect("team scorer");
    // The team frontend reaches its scorer through a proxy the test can make hang.
    let proxy = FaultProxy::start(team_scorer.addr())
        .await
        .expect("the team scorer's proxy");
    // The observer reaches the team scorer through its own proxy: a team scorer that hangs for the observer
    // only (a tenant's scorer that takes runs and never answers).
    let observer_proxy = FaultProxy::start(team_scorer.addr())
        .await
        .expect("the observer's proxy to the team scorer");
    let (cluster_version, team_version) = (
        scorer.policy().version.clone(),
        team_scorer.policy().version.clone(),
    );
    assert_ne!(cluster_version, team_version, "the two policies differ");
    cluster
        .create_priority_classes(scorer.policy())
        .await
        .expect("priority classes");
    for ns in [TEAM, OTHER, FAKE] {
        cluster.create_namespace(ns, Some("bronze")).await.unwrap();
    }
    cluster.create_namespace(SYSTEM_NS, None).await.unwrap();
    // bronze's one class, as a fake Node kwok keeps Ready (room for every Pod the test makes run).
    let l4 = scorer
        .policy()
        .catalog()
        .iter()
        .find(|c| c.name == "L4-24GB")
        .expect("L4-24GB in the catalog")
        .clone();
    kwok::create_ready_nodes(
        &client,
        &[kwok::gpu_node("kwok-l4", &l4, "nvidia.com/gpu", 64)],
    )
    .await
    .expect("kwok keeps the Node Ready");
    // The cluster observer: the cluster-wide scorer, and the team's scorer for gpu-team (in a cluster found
    // by the default template, gpu-admission-scorer.gpu-team.svc.cluster.local.; here on loopback).
    let observer = Observer::builder(cluster.kubeconfig(), &[scorer.url()], "observer-restricted")
        .env("LOG_FORMAT", "json")
        .arg(format!("--team-scorer={TEAM}={}", observer_proxy.url()))
        .start()
        .await
        .expect("observer");
    cluster.bind_tenant(USER).await.expect("tenant");
    // alice may also write Leases in her namespace FAKE (as any namespace editor may).
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "leases", "namespace": FAKE},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]}]});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "alice-leases", "namespace": FAKE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "leases"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]});
    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), FAKE)
        .create(
            &PostParams::default(),
            &serde_json::from_value(role).unwrap(),
        )
        .await
        .unwrap();
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), FAKE)
        .create(
            &PostParams::default(),
            &serde_json::from_value(binding).unwrap(),
        )
        .await
        .unwrap();

    let webhook = Webhook::builder(&scorer.url())
        .kubeconfig(cluster.kubeconfig())
        .policy_file(&cluster_file)
        .name("frontend-cluster")
        .start()
        .await
        .expect("cluster frontend");
    // The overlay's namespaced objects (not its Deployments and Services: the test runs the processes; not
    // cert-manager's: the test's CA), then its frontend as the overlay's ServiceAccount: --no-kube (the team
    // states its tier; the cluster-wide instance holds it to the real one), the API for its Lease only.
    let overlay = namespaced_overlay();
    let applied: Vec<&Value> = overlay
        .iter()
        .filter(|o| {
            matches!(
                o["kind"].as_str(),
                Some(
                    "ServiceAccount"
                        | "Role"
                        | "RoleBinding"
                        | "ClusterRole"
                        | "ClusterRoleBinding"
                        | "Lease"
                        | "ConfigMap"
                )
            )
        })
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": applied});
    let a = gpu_admission_tests::cluster::kubectl(
        cluster.kubeconfig(),
        None,
        &[],
        &["apply", "-f", "-"],
        &list.to_string(),
    );
    assert!(a.ok, "applying the overlay: {}", a.stderr);
    let team_kubeconfig = gpu_admission_tests::cluster::service_account_kubeconfig(
        cluster.kubeconfig(),
        dir.path(),
        TEAM,
        "gpu-admission-webhook",
    )
    .unwrap();
    let start_team = |name: &'static str| {
        Webhook::builder(&proxy.url())
            .kubeconfig(&team_kubeconfig)
            .no_kube()
            .policy_file(&team_file)
            .name(name)
            .arg("--restrict-to-namespaces")
            .arg(TEAM)
            .start()
    };
    let mut team = start_team("frontend-team")
        .await
        .expect("restricted frontend");
    let mutating =
        |v: Value| -> MutatingWebhookConfiguration { serde_json::from_value(v).unwrap() };
    let mwc = Api::<MutatingWebhookConfiguration>::all(client.clone());
    mwc.create(
        &PostParams::default(),
        &mutating(
            gpu_admission_tests::cluster::shipped_registration(
                "mutatingwebhookconfiguration.yaml",
                &webhook,
                &["pods.gpu-admission.io"],
                "gpu-admission",
            )
            .unwrap(),
        ),
    )
    .await
    .unwrap();
    // The overlay's registration, pointed at the test's restricted frontend.
    let mut restricted = overlay
        .iter()
        .find(|o| o["kind"] == "MutatingWebhookConfiguration")
        .expect("the overlay's registration")
        .clone();
    let ca = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        team.ca_pem().unwrap(),
    );
    restricted["metadata"]["annotations"] = json!({});
    restricted["webhooks"][0]["clientConfig"] = json!({"url": team.mutate_url(), "caBundle": ca});
    restricted["webhooks"][0]["timeoutSeconds"] = json!(10);
    let registration = restricted.clone();
    mwc.create(&PostParams::default(), &mutating(restricted))
        .await
        .unwrap();
    let validating: ValidatingWebhookConfiguration = serde_json::from_value(
        gpu_admission_tests::cluster::shipped_registration(
            "validatingwebhookconfiguration.yaml",
            &webhook,
            &["pods.validate.gpu-admission.io"],
            "gpu-admission-validate",
        )
        .unwrap(),
    )
    .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &validating)
        .await
        .unwrap();

    // The restricted instance holds its Lease once ready.
    let leases = Api::<Lease>::namespaced(client.clone(), TEAM);
    // The Lease's holder once it is someone else than `not`, within 20 s.
    let holder_other_than = |not: Option<String>| {
        let leases = leases.clone();
        async move {
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(20) {
                let lease = leases.get_opt(LEASE_NAME).await.unwrap();
                let holder = lease.and_then(|l| l.spec?.holder_identity);
                if holder.is_some() && holder != not {
                    return holder;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            None
        }
    };
    let first_holder = holder_other_than(None).await;
    assert!(
        first_holder.is_some(),
        "the restricted instance takes its Lease\n{}",
        team.process.log_tail(30)
    );

    let tenant = tenant_client(cluster.kubeconfig()).await;
    let create = |ns: &'static str, pod: Value| {
        let api = Api::<Pod>::namespaced(tenant.clone(), ns);
        async move {
            api.create(
                &PostParams::default(),
                &serde_json::from_value(pod).unwrap(),
            )
            .await
        }
    };
    let rules = snapshot.tier_rules("bronze", TEAM).unwrap();
    let bound = |pod: &Pod| {
        tier_bound::check(
            pod.spec.as_ref().unwrap(),
            &rules,
            snapshot.catalog(),
            &NoNodes,
        )
        .is_ok()
    };
    let mut table = CaseTable::start();

    // 1. The team's Pod: the restricted scorer's decision; the apiserver calls new registrations after a
    // moment, so the first Pods may come before them.
    let mut team_pod = None;
    for i in 0..40 {
        let p = create(TEAM, gpu_pod(&format!("team-{i}"), None))
            .await
            .unwrap();
        if annotation(&p, "gpu-admission.io/policy-version") == Some(team_version.as_str()) {
            team_pod = Some(p);
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let p = team_pod.expect("a team Pod decided by the restricted instance");
    table.check(
        "team Pod: decided by the restricted instance",
        format!(
            "policy-version {:?}, decided-by {:?}, bound {}",
            annotation(&p, "gpu-admission.io/policy-version"),
            annotation(&p, "gpu-admission.io/decided-by"),
            bound(&p)
        ),
        annotation(&p, "gpu-admission.io/decided-by") == Some("restricted:gpu-team")
            && annotation(&p, "gpu-admission.io/placement") == Some("gpu-admission")
            && bound(&p),
    );
    let p = create(OTHER, gpu_pod("other-1", None)).await.unwrap();
    table.check(
        "other namespace's Pod: decided by the cluster-wide instance",
        format!(
            "policy-version {:?}, decided-by {:?}",
            annotation(&p, "gpu-admission.io/policy-version"),
            annotation(&p, "gpu-admission.io/decided-by")
        ),
        annotation(&p, "gpu-admission.io/policy-version") == Some(cluster_version.as_str())
            && annotation(&p, "gpu-admission.io/decided-by").is_none()
            && bound(&p),
    );
    // 2. Learning: each instance's scorer learns its own namespace's runs, and the record names its state.
    let learning = Learning {
        client: &client,
        tenant: &tenant,
        observer: &observer,
        scorer: &scorer,
        team_scorer: &team_scorer,
        cluster_version: &cluster_version,
    };
    learning_goes_to_the_deciding_instance(&learning, &mut table).await;
    hung_team_scorer_delays_no_other_learning(&learning, &observer_proxy, &mut table).await;

    // 3. The team's H100 pin: denied by the cluster-wide validation.
    let denied = create(TEAM, gpu_pod("team-h100", Some("H100-80GB"))).await;
    table.check(
        "team Pod pinning H100 (bronze), Enforce",
        format!("{denied:?}").chars().take(160).collect(),
        matches!(&denied, Err(kube::Error::Api(e)) if e.message.contains("outside tier bronze")),
    );

    // 4. alice's fake Lease in FAKE and a record she wrote on her Pod: no registration names FAKE, so the
    // cluster-wide instance ignores the Lease, decides the Pod again and removes her `decided-by`.
    let fake: Lease = serde_json::from_value(json!({"apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease", "metadata": {"name": LEASE_NAME, "namespace": FAKE},
        "spec": {"holderIdentity": "alice", "leaseDurationSeconds": 3600,
                 "renewTime": k8s_openapi::jiff::Timestamp::now().to_string()}}))
    .unwrap();
    Api::<Lease>::namespaced(tenant.clone(), FAKE)
        .create(&PostParams::default(), &fake)
        .await
        .expect("alice creates her own Lease");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut forged = gpu_pod("fake-forged", Some("L4-24GB"));
    forged["metadata"]["annotations"] = json!({
        "gpu-admission.io/decided-by": format!("restricted:{FAKE}"),
        "gpu-admission.io/decided-at": "2026-11-29T09:00:00Z",
        "gpu-admission.io/placement": "gpu-admission",
        "gpu-admission.io/gpu-class": "L4-24GB",
    });
    let p = create(FAKE, forged).await.unwrap();
    table.check(
        "fake Lease + forged record: decided by the cluster-wide instance, decided-by removed",
        format!(
            "policy-version {:?}, decided-by {:?}, bound {}",
            annotation(&p, "gpu-admission.io/policy-version"),
            annotation(&p, "gpu-admission.io/decided-by"),
            bound(&p)
        ),
        annotation(&p, "gpu-admission.io/policy-version") == Some(cluster_version.as_str())
            && annotation(&p, "gpu-admission.io/decided-by").is_none()
            && bound(&p),
    );
    let denied = create(FAKE, gpu_pod("fake-h100", Some("H100-80GB"))).await;
    table.check(
        "fake Lease: alice's H100 pin, Enforce",
        format!("{denied:?}").chars().take(160).collect(),
        matches!(&denied, Err(kube::Error::Api(e)) if e.message.contains("outside tier bronze")),
    );

    // Creates team Pods every 250 ms until one is scored by the cluster-wide instance (its policy version, no
    // fallback): how many were created, how many of them unbound, and when it came back.
    let until_back = |prefix: &'static str, since: Instant| {
        let create = &create;
        let bound = &bound;
        let cluster_version = cluster_version.clone();
        async move {
            let (mut created, mut unbound, mut back) = (0, 0, None);
            while since.elapsed() < Duration::from_secs(30) {
                let p = create(TEAM, gpu_pod(&format!("{prefix}-{created}"), None))
                    .await
                    .unwrap();
                created += 1;
                if !bound(&p) {
                    unbound += 1;
                }
                if annotation(&p, "gpu-admission.io/policy-version")
                    == Some(cluster_version.as_str())
                    && annotation(&p, "gpu-admission.io/fallback").is_none()
                {
                    back = Some(since.elapsed());
                    break;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            (created, unbound, back)
        }
    };

    // 4b, 4c. The team scorer hung, then the namespace relabelled.
    let hand_over = HandOver {
        client: &client,
        tenant: &tenant,
        leases: &leases,
        proxy: &proxy,
        snapshot: &snapshot,
        cluster_version: &cluster_version,
        team_version: &team_version,
    };
    hung_scorer_hands_the_namespace_back(&hand_over, &mut table).await;
    relabelled_namespace_admits_in_the_new_tier(&hand_over, &mut table).await;

    // 5. The restricted instance killed (no release): every Pod meanwhile bound, the namespace back with the
    // cluster-wide scorer within the Lease duration.
    team.process.kill();
    let (created, unbound, back) = until_back("after-kill", Instant::now()).await;
    println!("restricted instance killed: {created} Pods created, back after {back:?}");
    table.check(
        "restricted instance killed: Pods meanwhile all bound",
        format!("{created} created, {unbound} unbound"),
        unbound == 0 && created > 1,
    );
    table.check(
        "restricted instance killed: back with the cluster-wide scorer within the Lease (15 s + 3 s)",
        format!("{back:?}"),
        back.is_some_and(|b| b <= Duration::from_secs(18)),
    );

    // 6. A new restricted instance (registration pointed at it) takes the Lease and decides again; stopped
    // with SIGTERM it releases the Lease at once: the namespace is back within a second or two.
    let team2 = start_team("frontend-team-2")
        .await
        .expect("restricted frontend, again");
    let mut registration = registration;
    registration["webhooks"][0]["clientConfig"] = json!({
        "url": team2.mutate_url(),
        "caBundle": base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            team2.ca_pem().unwrap(),
        ),
    });
    mwc.patch(
        registration["metadata"]["name"].as_str().unwrap(),
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"webhooks": registration["webhooks"]})),
    )
    .await
    .unwrap();
    let mut again = false;
    for i in 0..60 {
        let p = create(TEAM, gpu_pod(&format!("again-{i}"), None))
            .await
            .unwrap();
        if annotation(&p, "gpu-admission.io/policy-version") == Some(team_version.as_str()) {
            again = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    table.check(
        "a new restricted instance decides again",
        format!("{again}"),
        again,
    );
    let second_holder = holder_other_than(first_holder).await;
    table.check(
        "the new restricted instance holds the Lease",
        format!("{second_holder:?}"),
        second_holder.is_some(),
    );
    team2.process.terminate().unwrap();
    let (created, unbound, back) = until_back("after-term", Instant::now()).await;
    println!("restricted instance stopped (SIGTERM): {created} Pods created, back after {back:?}");
    table.check(
        "restricted instance stopped (SIGTERM): Pods meanwhile all bound, back at once (< 5 s: Lease released)",
        format!("{created} created, {unbound} unbound, back after {back:?}"),
        unbound == 0 && back.is_some_and(|b| b < Duration::from_secs(5)),
    );
    let lease = leases.get_opt(LEASE_NAME).await.unwrap();
    let holder = lease.and_then(|l| l.spec?.holder_identity);
    table.check(
        "restricted instance stopped (SIGTERM): its Lease has no holder",
        format!("{holder:?}"),
        holder.is_none(),
    );
    table.finish(&format!(
        "{}\n{}\n{}\n{}",
        observer.process.log_tail(30),
        webhook.process.log_tail(30),
        team.process.log_tail(30),
        team2.process.log_tail(30)
    ));
}

/// What the learning step needs of the test's setup.
struct Learning<'a> {
    client: &'a kube::Client,
    tenant: &'a kube::Client,
    observer: &'a Observer,
    scorer: &'a Scorer,
    team_scorer: &'a Scorer,
    cluster_version: &'a str,
}

/// The team's scorer hangs for the observer (connections open, nothing answered) while a team run is to be
/// delivered to it: the other namespace's run, finishing meanwhile, is learned by the cluster-wide scorer
/// within the observer's one delivery budget (5 s) and its tick, not held behind the team's; the team's run
/// waits and is learned once its scorer answers again.
async fn hung_team_scorer_delays_no_other_learning(
    l: &Learning<'_>,
    observer_proxy: &FaultProxy,
    table: &mut CaseTable,
) {
    let (cluster_before, team_before) = (learned(l.scorer).await, learned(l.team_scorer).await);
    let jobs = |ns: &str| Api::<Job>::namespaced(l.client.clone(), ns);
    let job = |name: &str| serde_json::from_value::<Job>(run_job(name)).unwrap();
    let done = |ns: &'static str, job: &'static str| {
        let client = l.client.clone();
        async move {
            Ok(Api::<Pod>::namespaced(client, ns)
                .list(&ListParams::default().labels(&format!("job-name={job}")))
                .await?
                .items
                .iter()
                .any(|p| kwok::phase(p) == "Succeeded"))
        }
    };
    // The team's run finishes first; the observer's delivery of it hangs.
    observer_proxy.set_mode(ProxyMode::Hang);
    jobs(TEAM)
        .create(&PostParams::default(), &job("team-while-hung"))
        .await
        .unwrap();
    let team_done = wait_for("the team's run Succeeded", Duration::from_secs(30), || {
        done(TEAM, "team-while-hung")
    })
    .await;
    // Two observer ticks (1 s): a delivery to the hung scorer has started.
    tokio::time::sleep(Duration::from_secs(2)).await;
    jobs(OTHER)
        .create(&PostParams::default(), &job("other-while-hung"))
        .await
        .unwrap();
    let other_done = wait_for(
        "the other namespace's run Succeeded",
        Duration::from_secs(30),
        || done(OTHER, "other-while-hung"),
    )
    .await;
    let other_learned = wait_for(
        "the other namespace's run learned while the team's scorer hangs",
        Duration::from_secs(30),
        || async { Ok(learned(l.scorer).await.0 > cluster_before.0) },
    )
    .await;
    let team_while_hung = learned(l.team_scorer).await.0;
    // The team's round is in flight all along: it ends at its budget (5 s after it started, which may be after
    // the other run was learned) or, as the budget and the Observe call's own 5 s timeout race, on that
    // timeout; either way its runs wait and the next round starts.
    let over_budget = wait_for(
        "the team's round over its budget",
        Duration::from_secs(15),
        || async {
            let log = l.observer.process.log();
            Ok(log.contains("did not take its runs within the budget")
                || log.lines().any(|line| {
                    line.contains("no scorer replica answered Observe; runs wait")
                        && line.contains(&format!("Team(\\\"{TEAM}\\\")"))
                }))
        },
    )
    .await
    .is_ok();
    observer_proxy.set_mode(ProxyMode::Forward);
    let team_later = wait_for(
        "the team's run learned once its scorer answers",
        Duration::from_secs(30),
        || async { Ok(learned(l.team_scorer).await.0 > team_before.0) },
    )
    .await;
    if team_done.is_err() || other_done.is_err() || other_learned.is_err() || team_later.is_err() {
        println!("observer:\n{}", l.observer.process.log_tail(40));
    }
    println!(
        "team scorer hung for the observer: the other namespace's run learned {other_learned:?} after it finished"
    );
    table.check(
        "team scorer hung for the observer, a team run waiting: the other namespace's run learned without waiting for it (≤ 7 s)",
        format!(
            "learned {other_learned:?} after it finished; the team's delivery over budget: {over_budget}; team scorer {} -> {team_while_hung} while hung",
            team_before.0
        ),
        team_done.is_ok()
            && other_done.is_ok()
            && other_learned.is_ok_and(|d| d <= Duration::from_secs(7))
            && over_budget
            && team_while_hung == team_before.0,
    );
    table.check(
        "team scorer answers the observer again: the team's run is learned then",
        format!("{:?}", team_later.as_ref().map(|d| format!("{d:?}"))),
        team_later.is_ok(),
    );
}

async fn create(tenant: &kube::Client, ns: &str, pod: Value) -> Pod {
    Api::<Pod>::namespaced(tenant.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap()
}

/// A Job in each namespace runs to completion on kwok; the observer reports the team's run (decided by the
/// restricted instance) to the team's scorer only, the other namespace's to the cluster-wide scorer only, and
/// a forged record to nobody; then each Pod's record carries the state digest of the scorer that decided it.
async fn learning_goes_to_the_deciding_instance(l: &Learning<'_>, table: &mut CaseTable) {
    let Learning {
        client,
        tenant,
        observer,
        scorer,
        team_scorer,
        cluster_version,
    } = *l;
    let (cluster_before, team_before) = (learned(scorer).await, learned(team_scorer).await);
    for ns in [TEAM, OTHER] {
        Api::<Job>::namespaced(client.clone(), ns)
            .create(
                &PostParams::default(),
                &serde_json::from_value(run_job("run")).unwrap(),
            )
            .await
            .unwrap();
    }
    // A tenant's forged signature in another namespace: the cluster-wide instance writes its record and
    // removes the signature, so the run is the cluster-wide scorer's to learn like the namespace's others
    // (before, it named the team's instance and kept the run out of every scorer's learning).
    let mut forged = run_job("forged");
    forged["spec"]["template"]["metadata"]["annotations"]["gpu-admission.io/decided-by"] =
        json!("restricted:gpu-team");
    Api::<Job>::namespaced(client.clone(), OTHER)
        .create(
            &PostParams::default(),
            &serde_json::from_value(forged).unwrap(),
        )
        .await
        .unwrap();
    let reported = wait_for(
        "the three runs reported",
        Duration::from_secs(60),
        || async {
            let m = observer.metrics().await?;
            Ok(metric_value(&m, "observer_reported_total{result=\"learned\"}") >= 3.0)
        },
    )
    .await;
    let run_pod = |ns: &'static str, job: &'static str| {
        let client = client.clone();
        async move {
            Api::<Pod>::namespaced(client, ns)
                .list(&ListParams::default().labels(&format!("job-name={job}")))
                .await
                .unwrap()
                .items
                .pop()
                .expect("the Job's Pod")
        }
    };
    let forged_done = wait_for(
        "the forged Job's Pod Succeeded",
        Duration::from_secs(30),
        || async { Ok(kwok::phase(&run_pod(OTHER, "forged").await) == "Succeeded") },
    )
    .await;
    // The observer reports within its next tick (1 s) what it can report.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (team_run, other_run) = (run_pod(TEAM, "run").await, run_pod(OTHER, "run").await);
    let forged_run = run_pod(OTHER, "forged").await;
    if reported.is_err() || forged_done.is_err() {
        println!("observer:\n{}", observer.process.log_tail(30));
    }
    let (cluster_after, team_after) = (learned(scorer).await, learned(team_scorer).await);
    let reports = observer.reports();
    let learner_of = |pod: &Pod| {
        let name = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        reports
            .iter()
            .filter(|r| r["pod"].as_str().unwrap_or_default().trim_matches('"') == name)
            .map(|r| r["learner"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    table.check(
        "team's Job (decided by the restricted instance) ran on kwok: learned by the team's scorer only",
        format!(
            "decided-by {:?}, phase {}, reported to {:?}; team scorer {} -> {} observations, cluster scorer {} -> {}",
            annotation(&team_run, "gpu-admission.io/decided-by"),
            kwok::phase(&team_run),
            learner_of(&team_run),
            team_before.0,
            team_after.0,
            cluster_before.0,
            cluster_after.0
        ),
        annotation(&team_run, "gpu-admission.io/decided-by") == Some("restricted:gpu-team")
            && kwok::phase(&team_run) == "Succeeded"
            && learner_of(&team_run) == [format!("Team({TEAM:?})")]
            && team_after.0 == team_before.0 + 1,
    );
    table.check(
        "other namespace's Job: learned by the cluster-wide scorer only",
        format!(
            "decided-by {:?}, phase {}, reported to {:?}",
            annotation(&other_run, "gpu-admission.io/decided-by"),
            kwok::phase(&other_run),
            learner_of(&other_run)
        ),
        annotation(&other_run, "gpu-admission.io/decided-by").is_none()
            && kwok::phase(&other_run) == "Succeeded"
            && learner_of(&other_run) == ["Cluster"],
    );
    table.check(
        "a forged signature (decided-by restricted:gpu-team in another namespace): removed, learned by the cluster-wide scorer",
        format!(
            "policy-version {:?}, decided-by {:?}, phase {}, reported to {:?}; team scorer {} observations, cluster scorer {}",
            annotation(&forged_run, "gpu-admission.io/policy-version"),
            annotation(&forged_run, "gpu-admission.io/decided-by"),
            kwok::phase(&forged_run),
            learner_of(&forged_run),
            team_after.0,
            cluster_after.0
        ),
        annotation(&forged_run, "gpu-admission.io/policy-version") == Some(cluster_version)
            && annotation(&forged_run, "gpu-admission.io/decided-by").is_none()
            && kwok::phase(&forged_run) == "Succeeded"
            && learner_of(&forged_run) == ["Cluster"]
            && team_after.0 == team_before.0 + 1
            && cluster_after.0 == cluster_before.0 + 2,
    );
    // The record names the learned state each scorer decided with: now that each learned its own run, the two
    // differ, and a new Pod carries its own scorer's.
    let p = create(tenant, TEAM, gpu_pod("team-digest", None)).await;
    table.check(
        "team Pod's record: the team scorer's state digest",
        format!(
            "state-digest {:?}; team scorer {:?}, cluster scorer {:?}",
            annotation(&p, STATE_DIGEST),
            team_after.1,
            cluster_after.1
        ),
        annotation(&p, STATE_DIGEST) == Some(team_after.1.as_str())
            && team_after.1 != cluster_after.1,
    );
    let p = create(tenant, OTHER, gpu_pod("other-digest", None)).await;
    table.check(
        "other namespace's Pod's record: the cluster scorer's state digest",
        format!("state-digest {:?}", annotation(&p, STATE_DIGEST)),
        annotation(&p, STATE_DIGEST) == Some(cluster_after.1.as_str()),
    );
}

/// What the hand-over steps need of the test's setup.
struct HandOver<'a> {
    client: &'a kube::Client,
    tenant: &'a kube::Client,
    leases: &'a Api<Lease>,
    proxy: &'a FaultProxy,
    snapshot: &'a PolicySnapshot,
    cluster_version: &'a str,
    team_version: &'a str,
}

impl HandOver<'_> {
    async fn holder(&self) -> Option<String> {
        let lease = self.leases.get_opt(LEASE_NAME).await.unwrap();
        lease.and_then(|l| l.spec?.holder_identity)
    }

    fn bound_to(&self, pod: &Pod, tier: &str) -> bool {
        let rules = self.snapshot.tier_rules(tier, TEAM).unwrap();
        tier_bound::check(
            pod.spec.as_ref().unwrap(),
            &rules,
            self.snapshot.catalog(),
            &NoNodes,
        )
        .is_ok()
    }

    /// Creates team Pods every 250 ms until one is decided by the team's instance (within 20 s).
    async fn until_team_decides(&self, prefix: &str) -> Option<Duration> {
        let since = Instant::now();
        let mut i = 0;
        while since.elapsed() < Duration::from_secs(20) {
            let p = create(self.tenant, TEAM, gpu_pod(&format!("{prefix}-{i}"), None)).await;
            i += 1;
            if annotation(&p, "gpu-admission.io/policy-version") == Some(self.team_version) {
                return Some(since.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        None
    }
}

/// The team's scorer hangs (its connections kept open, nothing answered): every team Pod meanwhile is
/// decided by the cluster-wide scorer (the restricted record says it fell back), the team frontend gives the
/// Lease back after 3 fallbacks, and takes it again once its scorer answers.
async fn hung_scorer_hands_the_namespace_back(h: &HandOver<'_>, table: &mut CaseTable) {
    assert!(h.holder().await.is_some(), "the team holds its Lease");
    h.proxy.set_mode(ProxyMode::Hang);
    let since = Instant::now();
    let (mut created, mut by_cluster, mut unbound, mut released) = (0, 0, 0, None);
    while since.elapsed() < Duration::from_secs(20) && (released.is_none() || created < 8) {
        let p = create(h.tenant, TEAM, gpu_pod(&format!("hung-{created}"), None)).await;
        created += 1;
        if annotation(&p, "gpu-admission.io/policy-version") == Some(h.cluster_version)
            && annotation(&p, "gpu-admission.io/decided-by").is_none()
            && annotation(&p, "gpu-admission.io/fallback").is_none()
        {
            by_cluster += 1;
        }
        if !h.bound_to(&p, "bronze") {
            unbound += 1;
        }
        if released.is_none() && h.holder().await.is_none() {
            released = Some(since.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!(
        "team scorer hung: {created} Pods, {by_cluster} scored by the cluster-wide scorer, Lease released after {released:?}"
    );
    table.check(
        "team scorer hung: every team Pod scored by the cluster-wide scorer, none unbound",
        format!("{created} created, {by_cluster} by the cluster, {unbound} unbound"),
        created > 3 && by_cluster == created && unbound == 0,
    );
    table.check(
        "team scorer hung: the team gives its Lease back (3 fallbacks, or 10 s)",
        format!("{released:?}"),
        released.is_some_and(|r| r <= Duration::from_secs(12)),
    );
    h.proxy.set_mode(ProxyMode::Forward);
    let back = h.until_team_decides("recovered").await;
    let holder = h.holder().await;
    println!("team scorer answers again: the team decides again after {back:?}");
    table.check(
        "team scorer answers again: the team takes its Lease back and decides",
        format!("decides after {back:?}, holder {holder:?}"),
        back.is_some() && holder.is_some(),
    );
}

/// The platform moves the team namespace from bronze to platinum: every team Pod created from then on is
/// admitted and held to platinum's classes (the team instance reads the label within 5 s; until then the
/// cluster-wide instance replaces the bronze class constraint it finds), then back to bronze.
async fn relabelled_namespace_admits_in_the_new_tier(h: &HandOver<'_>, table: &mut CaseTable) {
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(h.client.clone());
    let relabel = |tier: &'static str| {
        let namespaces = namespaces.clone();
        async move {
            namespaces
                .patch(
                    TEAM,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"metadata": {"labels": {
                        gpu_admission_core::names::DEFAULT_TIER_LABEL: tier}}})),
                )
                .await
                .unwrap();
        }
    };
    relabel("platinum").await;
    let since = Instant::now();
    let (mut created, mut denied, mut outside, mut by_team) = (0, 0, 0, 0);
    // At least 10 s (the relabel's pickup by both instances) and 11 Pods, however slow a loaded machine
    // makes each CREATE; at most a minute.
    while (since.elapsed() < Duration::from_secs(10) || created <= 10)
        && since.elapsed() < Duration::from_secs(60)
    {
        let pod: Pod =
            serde_json::from_value(gpu_pod(&format!("relabel-{created}"), None)).unwrap();
        created += 1;
        match Api::<Pod>::namespaced(h.tenant.clone(), TEAM)
            .create(&PostParams::default(), &pod)
            .await
        {
            Ok(p) => {
                if !h.bound_to(&p, "platinum") {
                    outside += 1;
                }
                if annotation(&p, "gpu-admission.io/policy-version") == Some(h.team_version) {
                    by_team += 1;
                }
            }
            Err(e) => {
                println!("relabelled: denied {e}");
                denied += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!(
        "relabelled to platinum: {created} Pods, {denied} denied, {by_team} decided by the team"
    );
    table.check(
        "relabelled bronze → platinum: every team Pod admitted inside platinum",
        format!(
            "{created} created, {denied} denied, {outside} outside platinum, {by_team} by the team"
        ),
        created > 10 && denied == 0 && outside == 0 && by_team > 0,
    );
    relabel("bronze").await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let back = h.until_team_decides("bronze-again").await;
    table.check(
        "relabelled back to bronze: the team decides again",
        format!("{back:?}"),
        back.is_some(),
    );
}
