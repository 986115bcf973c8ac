//! Hot reload of the policy file.
//!
//! The file is polled (read and hashed) rather than watched with inotify: a Kubernetes ConfigMap volume
//! updates by swapping the `..data` symlink, which path-based polling follows with no special case, and
//! a poll is one small read per interval. A new file replaces the policy in force only once it parsed
//! and validated; requests in flight keep the `Arc<Policy>` they started with.
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
#[cfg(feature = "tokio")]
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::{Policy, PolicyError, validate};

/// The policy in force (none until a valid one was loaded). Cheap to read: an `Arc` clone under a
/// read lock that is never held across anything slow.
#[derive(Debug, Default)]
pub struct PolicyStore {
    current: RwLock<Option<Arc<Policy>>>,
}

impl PolicyStore {
    pub fn new(initial: Option<Policy>) -> Self {
        Self {
            current: RwLock::new(initial.map(Arc::new)),
        }
    }

    pub fn current(&self) -> Option<Arc<Policy>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn replace(&self, policy: Arc<Policy>) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(policy);
    }
}

/// What one look at the file found.
#[derive(Debug)]
pub enum ReloadOutcome {
    /// Same bytes (or same error) as last time.
    Unchanged,
    /// A new valid policy, now in force.
    Loaded(Arc<Policy>),
    /// The file changed but is unreadable or invalid; the previous policy stays in force.
    Rejected(PolicyError),
}

#[derive(Debug, PartialEq)]
enum Seen {
    Nothing,
    Bytes([u8; 32]),
    ReadError(String),
}

/// Remembers what the file held last time, so that only changes are parsed and reported.
#[derive(Debug)]
pub struct FileWatcher {
    path: PathBuf,
    seen: Seen,
}

impl FileWatcher {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            seen: Seen::Nothing,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file (following symlinks) and, when it changed, validates it and installs it in `store`.
    pub fn check(&mut self, store: &PolicyStore) -> ReloadOutcome {
        let file = self.path.display().to_string();
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) => {
                let seen = Seen::ReadError(e.to_string());
                if seen == self.seen {
                    return ReloadOutcome::Unchanged;
                }
                self.seen = seen;
                return ReloadOutcome::Rejected(PolicyError {
                    file,
                    problems: vec![validate::Problem {
                        field: "(file)".into(),
                        reason: format!("cannot read: {e}"),
                    }],
                });
            }
        };
        let seen = Seen::Bytes(Sha256::digest(&bytes).into());
        if seen == self.seen {
            return ReloadOutcome::Unchanged;
        }
        self.seen = seen;
        let parsed = match String::from_utf8(bytes) {
            Ok(text) => validate::parse(&text, &file),
            Err(_) => Err(PolicyError {
                file,
                problems: vec![validate::Problem {
                    field: "(file)".into(),
                    reason: "not UTF-8 text".into(),
                }],
            }),
        };
        match parsed {
            Ok(policy) => {
                let policy = Arc::new(policy);
                store.replace(policy.clone());
                ReloadOutcome::Loaded(policy)
            }
            Err(e) => ReloadOutcome::Rejected(e),
        }
    }
}

/// Polls `watcher` every `interval` until `shutdown` fires, sending each change to `report`.
#[cfg(feature = "tokio")]
pub async fn run(
    mut watcher: FileWatcher,
    store: Arc<PolicyStore>,
    interval: Duration,
    report: tokio::sync::mpsc::UnboundedSender<ReloadOutcome>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let outcome = watcher.check(&store);
                if !matches!(outcome, ReloadOutcome::Unchanged) && report.send(outcome).is_err() {
                    return;
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DEFAULT_POLICY_YAML;
    use std::os::unix::fs::symlink;

    fn with_version(v: &str) -> String {
        format!("version: {v}\n{DEFAULT_POLICY_YAML}")
    }

    /// Lays a directory out like a ConfigMap volume: `policy.yaml -> ..data/policy.yaml`,
    /// `..data -> ..<generation>`, and swaps `..data` atomically on update.
    struct ConfigMapDir {
        root: tempfile::TempDir,
        generation: u32,
    }

    impl ConfigMapDir {
        fn new(content: &str) -> Self {
            let root = tempfile::tempdir().unwrap();
            let mut dir = Self {
                root,
                generation: 0,
            };
            dir.update(content);
            symlink("..data/policy.yaml", dir.root.path().join("policy.yaml")).unwrap();
            dir
        }

        fn update(&mut self, content: &str) {
            self.generation += 1;
            let gen_dir = format!("..2026_{}", self.generation);
            std::fs::create_dir(self.root.path().join(&gen_dir)).unwrap();
            std::fs::write(self.root.path().join(&gen_dir).join("policy.yaml"), content).unwrap();
            let tmp = self.root.path().join("..data_tmp");
            symlink(&gen_dir, &tmp).unwrap();
            std::fs::rename(&tmp, self.root.path().join("..data")).unwrap();
        }

        fn path(&self) -> PathBuf {
            self.root.path().join("policy.yaml")
        }
    }

    fn version(store: &PolicyStore) -> String {
        store.current().unwrap().version.clone()
    }

    #[test]
    fn good_bad_good_through_a_configmap_symlink_swap() {
        let mut dir = ConfigMapDir::new(&with_version("v1"));
        let store = PolicyStore::new(None);
        let mut w = FileWatcher::new(dir.path());
        assert!(matches!(w.check(&store), ReloadOutcome::Loaded(_)));
        assert_eq!(version(&store), "v1");
        assert!(matches!(w.check(&store), ReloadOutcome::Unchanged));

        // Bad: a tier references a class that does not exist. v1 stays in force.
        let bad = with_version("v2").replace("preferredClass: L4-24GB", "preferredClass: T4-16GB");
        dir.update(&bad);
        match w.check(&store) {
            ReloadOutcome::Rejected(e) => {
                assert!(
                    e.to_string().contains("tiers[bronze].preferredClass"),
                    "{e}"
                );
                assert!(e.to_string().contains("T4-16GB"), "{e}");
                assert!(e.file.ends_with("policy.yaml"), "{e}");
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
        assert_eq!(version(&store), "v1");
        // The same bad bytes are not reported again.
        assert!(matches!(w.check(&store), ReloadOutcome::Unchanged));

        // Not even YAML.
        dir.update("catalog: [unterminated");
        assert!(matches!(w.check(&store), ReloadOutcome::Rejected(_)));
        assert_eq!(version(&store), "v1");

        // Good again.
        dir.update(&with_version("v3"));
        assert!(matches!(w.check(&store), ReloadOutcome::Loaded(_)));
        assert_eq!(version(&store), "v3");
    }

    #[test]
    fn a_missing_file_is_rejected_and_keeps_the_policy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        std::fs::write(&path, with_version("v1")).unwrap();
        let store = PolicyStore::new(None);
        let mut w = FileWatcher::new(&path);
        assert!(matches!(w.check(&store), ReloadOutcome::Loaded(_)));
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(w.check(&store), ReloadOutcome::Rejected(_)));
        assert!(matches!(w.check(&store), ReloadOutcome::Unchanged));
        assert_eq!(version(&store), "v1");
        std::fs::write(&path, with_version("v1")).unwrap();
        assert!(matches!(w.check(&store), ReloadOutcome::Loaded(_)));
    }

    #[cfg(feature = "tokio")]
    #[tokio::test]
    async fn the_poll_loop_picks_up_a_swap() {
        let mut dir = ConfigMapDir::new(&with_version("v1"));
        let store = Arc::new(PolicyStore::new(None));
        let (tx, rx) = tokio::sync::watch::channel(false);
        let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(run(
            FileWatcher::new(dir.path()),
            store.clone(),
            Duration::from_millis(20),
            events_tx,
            rx,
        ));
        assert!(matches!(
            events.recv().await,
            Some(ReloadOutcome::Loaded(_))
        ));
        dir.update(&with_version("v2"));
        assert!(matches!(
            events.recv().await,
            Some(ReloadOutcome::Loaded(_))
        ));
        assert_eq!(version(&store), "v2");
        tx.send(true).unwrap();
        task.await.unwrap();
    }
}
