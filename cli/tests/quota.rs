//! `gpu-admission check --usage FILE`: each GPU Pod of a tier with a quota is decided against the usage
//! snapshot as `/validate-pod` decides it (the same core functions), and what is admitted is added.

use gpu_admission_cli::evaluate::Verdict;
use gpu_admission_cli::load::Tiers;
use gpu_admission_cli::review::User;
use gpu_admission_cli::{Run, RunSettings};

const QUOTAS: &str = "
quotas:
  tiers:
    - tier: bronze
      classes: { L4-24GB: { min: 16, max: 32 } }
";

fn pod(name: &str, gpus: u32) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{ name: {name}, namespace: batch }}\nspec:\n  containers: \
         [{{ name: c, image: x, resources: {{ limits: {{ nvidia.com/gpu: \"{gpus}\" }} }} }}]\n"
    )
}

/// Per object: verdict, message, warnings, notes.
type Answer = (Verdict, Option<String>, Vec<String>, Vec<String>);

fn check(mode: &str, usage: Option<&str>) -> Vec<Answer> {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        format!("{}{QUOTAS}", gpu_admission_policy::DEFAULT_POLICY_YAML),
    )
    .unwrap();
    let pods = dir.path().join("pods.yaml");
    std::fs::write(&pods, [pod("a", 1), pod("b", 4), pod("c", 1)].concat()).unwrap();
    let usage_file = usage.map(|u| {
        let p = dir.path().join("usage.yaml");
        std::fs::write(&p, u).unwrap();
        p
    });
    let settings = RunSettings {
        policy: Some(policy),
        policy_key: None,
        mode: Some(mode.into()),
        state: None,
        tiers: Tiers::parse(&["batch=bronze".to_string()]).unwrap(),
        requester: User::default_requester(),
        no_kube: false,
        default_namespace: "default".into(),
        usage: usage_file,
    };
    Run::new(&settings)
        .unwrap()
        .check(&[pods])
        .unwrap()
        .evaluations
        .into_iter()
        .map(|e| (e.verdict, e.message, e.warnings, e.notes))
        .collect()
}

const USAGE: &str =
    "namespaces:\n  students: { tier: bronze, classes: { L4-24GB: 30000 }, total: 30000 }\n";

#[test]
fn pods_are_decided_against_the_snapshot_and_the_admitted_ones_added() {
    let e = check("Enforce", Some(USAGE));
    // a: 30 + 1 of 32, beyond min 16: borrowed, admitted (31 held now).
    assert_eq!(e[0].0, Verdict::Allowed, "{:?}", e[0]);
    assert!(e[0].3.iter().any(|n| n.ends_with("gpu-admission.io/quota: bronze L4-24GB 30/32 (min 16): borrowed")), "{:?}", e[0]);
    // b: 31 + 4 > 32: denied, with what is free.
    assert_eq!(e[1].0, Verdict::Denied, "{:?}", e[1]);
    let m = e[1].1.as_deref().unwrap();
    assert!(
        m.contains("tier bronze holds 31 of its 32 L4-24GB GPUs; this Pod asks for 4: 1 is free"),
        "{m}"
    );
    // c: the denied Pod took nothing: 31 + 1 fits.
    assert_eq!(e[2].0, Verdict::Allowed, "{:?}", e[2]);
    // In Warn the over-max Pod is admitted with the message as a warning.
    let w = check("Warn", Some(USAGE));
    assert_eq!(w[1].0, Verdict::Warned, "{:?}", w[1]);
    assert!(
        w[1].2.iter().any(|x| x.contains("holds 31 of its 32")),
        "{:?}",
        w[1]
    );
}

#[test]
fn without_a_snapshot_quotas_are_not_checked() {
    let e = check("Enforce", None);
    assert!(e.iter().all(|x| x.0 == Verdict::Allowed), "{e:?}");
    assert!(
        e.iter().all(|x| x.3.iter().all(|n| !n.contains("quota"))),
        "{e:?}"
    );
}

/// `quota render`: each share's namespace in its share's tier by default; the input's Namespaces and
/// `--namespace` say otherwise (a namespace relabelled out of its share's tier gets no ResourceQuota).
#[test]
fn quota_render_follows_the_namespaces_tiers() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    let share =
        "      namespaces:\n        - { namespace: batch, classes: { L4-24GB: { max: 2.5 } } }\n";
    std::fs::write(
        &policy,
        format!(
            "{}{QUOTAS}{share}",
            gpu_admission_policy::DEFAULT_POLICY_YAML
        ),
    )
    .unwrap();
    let namespaces = dir.path().join("namespaces.yaml");
    std::fs::write(
        &namespaces,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: batch, labels: {tenant.kubenexus.io/tier: silver}}\n",
    )
    .unwrap();
    let render = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
            .args(["quota", "render", "--policy"])
            .arg(&policy)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let default = render(&[]);
    assert_eq!(
        default.matches("kind: ResourceQuota").count(),
        1,
        "{default}"
    );
    assert!(default.contains("namespace: batch\n"), "{default}");
    assert!(
        default.contains("l4-24gb.gpu-admission.io.deviceclass.resource.k8s.io/devices: '2'"),
        "{default}"
    );
    let file = namespaces.to_str().unwrap();
    assert!(!render(&["-f", file]).contains("kind: ResourceQuota"));
    let back = render(&["-f", file, "--namespace", "batch=bronze"]);
    assert_eq!(back.matches("kind: ResourceQuota").count(), 1, "{back}");
}
