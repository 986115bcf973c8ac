use super::*;
use gpu_admission_policy::DEFAULT_POLICY_YAML;

/// The shipped policy with another version and enforcement mode.
fn policy_text(version: &str, mode: &str) -> String {
    format!("version: {version}\n{DEFAULT_POLICY_YAML}")
        .replace("  mode: Warn", &format!("  mode: {mode}"))
}

fn sources(dir: &Path) -> PolicySources {
    PolicySources {
        file: Some(dir.join("policy.yaml")),
        last_good: Some(dir.join("last-good.yaml")),
        poll_interval: Duration::from_millis(10),
    }
}

fn start(sources: &PolicySources) -> (PolicyCache, bool) {
    let cache = PolicyCache::default();
    let mut watcher = sources.file.clone().map(FileWatcher::new);
    let held = cache.load_at_start(sources, &mut watcher, &PolicyMetrics::default());
    (cache, held)
}

#[test]
fn a_valid_file_is_enforced_and_kept_as_the_last_good_copy() {
    let dir = tempfile::tempdir().unwrap();
    let s = sources(dir.path());
    std::fs::write(s.file.as_ref().unwrap(), policy_text("v1", "Enforce")).unwrap();
    let (cache, held) = start(&s);
    assert!(held && cache.is_known());
    let snap = cache.snapshot();
    assert_eq!(snap.version, "v1");
    assert_eq!(snap.mode, gpu_admission_policy::EnforcementMode::Enforce);
    let kept = std::fs::read_to_string(s.last_good.as_ref().unwrap()).unwrap();
    assert_eq!(kept, policy_text("v1", "Enforce"));
}

#[test]
fn an_invalid_file_at_start_falls_back_to_the_last_good_copy() {
    let dir = tempfile::tempdir().unwrap();
    let s = sources(dir.path());
    std::fs::write(s.last_good.as_ref().unwrap(), policy_text("v1", "Enforce")).unwrap();
    std::fs::write(s.file.as_ref().unwrap(), "catalog: [").unwrap();
    let (cache, held) = start(&s);
    assert!(held);
    assert_eq!(cache.snapshot().version, "v1");
}

#[test]
fn nothing_valid_holds_no_policy() {
    let dir = tempfile::tempdir().unwrap();
    let s = sources(dir.path());
    std::fs::write(s.file.as_ref().unwrap(), "tiers: 3").unwrap();
    let (cache, held) = start(&s);
    assert!(!held && !cache.is_known());
    // A last good copy that does not validate is not trusted either.
    std::fs::write(s.last_good.as_ref().unwrap(), "tiers: 3").unwrap();
    let (cache, held) = start(&s);
    assert!(!held && !cache.is_known());
}

#[test]
fn without_a_file_the_embedded_default_is_enforced() {
    let s = PolicySources {
        file: None,
        last_good: None,
        poll_interval: Duration::from_secs(1),
    };
    let (cache, held) = start(&s);
    assert!(held);
    let default = gpu_admission_policy::embedded_default().unwrap();
    assert_eq!(cache.snapshot().version, default.version);
}

#[tokio::test]
async fn an_invalid_edit_keeps_the_policy_and_a_valid_one_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = sources(dir.path());
    let file = s.file.clone().unwrap();
    std::fs::write(&file, policy_text("v1", "Enforce")).unwrap();
    let cache = Arc::new(PolicyCache::default());
    let mut watcher = Some(FileWatcher::new(&file));
    let metrics = Arc::new(PolicyMetrics::default());
    assert!(cache.load_at_start(&s, &mut watcher, &metrics));
    let task = tokio::spawn(
        cache
            .clone()
            .watch_file(watcher.unwrap(), s.clone(), metrics),
    );
    std::fs::write(&file, "catalog: [").unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        cache.snapshot().version,
        "v1",
        "an invalid edit changes nothing"
    );
    let kept = std::fs::read_to_string(s.last_good.as_ref().unwrap()).unwrap();
    assert!(
        kept.contains("version: v1"),
        "the last good copy is not overwritten"
    );
    std::fs::write(&file, policy_text("v2", "Warn")).unwrap();
    let mut version = String::new();
    for _ in 0..200 {
        version = cache.snapshot().version.clone();
        if version == "v2" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    task.abort();
    assert_eq!(version, "v2");
    let kept = std::fs::read_to_string(s.last_good.as_ref().unwrap()).unwrap();
    assert!(kept.contains("version: v2"));
}

#[test]
fn the_scorer_version_is_compared_with_ours() {
    let cache = PolicyCache::default();
    cache.set(PolicySnapshot::from_policy(Arc::new(
        gpu_admission_policy::parse(&policy_text("v1", "Enforce"), "p").unwrap(),
    )));
    let metrics = PolicyMetrics::default();
    cache.note_scorer_version("v1", &metrics);
    assert!(cache.disagreeing_since.read().unwrap().is_none());
    cache.note_scorer_version("v0", &metrics);
    let since = cache
        .disagreeing_since
        .read()
        .unwrap()
        .expect("disagreeing");
    // Unreachable: nothing is known, the disagreement is not reset.
    cache.note_scorer_version("", &metrics);
    assert_eq!(*cache.disagreeing_since.read().unwrap(), Some(since));
    cache.note_scorer_version("v1", &metrics);
    assert!(cache.disagreeing_since.read().unwrap().is_none());
}

#[test]
fn the_scorers_document_is_adopted_only_without_a_policy() {
    let metrics = PolicyMetrics::default();
    let scorer_policy =
        gpu_admission_policy::parse(&policy_text("scorer-v", "Enforce"), "s").unwrap();
    let response = wire::get_policy_response(&scorer_policy);
    let cache = PolicyCache::default();
    cache.adopt_if_none(&response, &metrics);
    assert_eq!(cache.snapshot().version, "scorer-v");
    let ours = gpu_admission_policy::parse(&policy_text("ours", "Enforce"), "o").unwrap();
    cache.set(PolicySnapshot::from_policy(Arc::new(ours)));
    cache.adopt_if_none(&response, &metrics);
    assert_eq!(
        cache.snapshot().version,
        "ours",
        "the frontend's own policy wins"
    );
    // An answer without a document gives nothing to adopt.
    let empty = PolicyCache::default();
    let old = gpu_admission_proto::scorer::v1::GetPolicyResponse {
        version: "old".into(),
        ..Default::default()
    };
    empty.adopt_if_none(&old, &metrics);
    assert!(!empty.is_known());
}
