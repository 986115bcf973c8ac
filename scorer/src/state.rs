//! Persistence of the learned state: a JSON snapshot written atomically (temp file in the same
//! directory, fsync, rename, fsync of the directory), so a crash leaves either the old or the new
//! snapshot, never half of one. A snapshot that cannot be read at start is reported, moved aside to
//! `<path>.corrupt`, and ignored: the scorer starts from the policy's priors.
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::Learned;

/// Identifies the snapshot format; bumped on incompatible changes.
pub const FORMAT: &str = "gpu-admission-scorer-state/v2";

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Snapshot {
    format: String,
    saved_at_unix_seconds: u64,
    learned: Learned,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot read state snapshot {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("state snapshot {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("cannot write state snapshot {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Reads a snapshot: `Ok(None)` when there is none yet.
pub fn load(path: &Path) -> Result<Option<Learned>, StateError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(StateError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let corrupt = |reason: String| StateError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let snapshot: Snapshot = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
    if snapshot.format != FORMAT {
        return Err(corrupt(format!(
            "format `{}`, expected `{FORMAT}`",
            snapshot.format
        )));
    }
    Ok(Some(snapshot.learned))
}

/// Encodes the learned state for another replica (`ExportState`): the snapshot format without this
/// replica's exploration window.
pub fn encode_shared(learned: &Learned) -> Result<Vec<u8>, serde_json::Error> {
    let shared = Learned {
        exploration: Default::default(),
        ..learned.clone()
    };
    serde_json::to_vec(&Snapshot {
        format: FORMAT.to_string(),
        saved_at_unix_seconds: now(),
        learned: shared,
    })
}

/// Decodes what [`encode_shared`] wrote.
pub fn decode_shared(bytes: &[u8]) -> Result<Learned, String> {
    let snapshot: Snapshot = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if snapshot.format != FORMAT {
        return Err(format!("format `{}`, expected `{FORMAT}`", snapshot.format));
    }
    Ok(snapshot.learned)
}

/// Whether `theirs` holds every observation `ours` holds: at least as many, and every id ours still
/// remembers. (Ids forgotten past the bound cannot be compared; the count covers them.)
pub fn is_superset(theirs: &Learned, ours: &Learned) -> bool {
    theirs.observations >= ours.observations && ours.observed.is_subset(&theirs.observed)
}

/// The digest of the learned state (see [`Learned::digest`]).
pub fn digest(learned: &Learned) -> String {
    learned.digest().to_string()
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Loads a snapshot, reporting (and moving aside) a corrupt one instead of failing.
pub fn load_or_report(path: &Path) -> Option<Learned> {
    match load(path) {
        Ok(Some(learned)) => {
            tracing::info!(path = %path.display(), "learned state restored");
            Some(learned)
        }
        Ok(None) => {
            tracing::info!(path = %path.display(), "no learned state snapshot yet; starting from the priors");
            None
        }
        Err(e) => {
            let aside = corrupt_path(path);
            let moved = fs::rename(path, &aside).is_ok();
            tracing::error!(
                error = %e,
                moved_to = %if moved { aside.display().to_string() } else { "(left in place)".into() },
                "ignoring the learned state snapshot; starting from the priors"
            );
            None
        }
    }
}

fn corrupt_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".corrupt");
    PathBuf::from(s)
}

/// Writes `learned` to `path` atomically.
pub fn save(path: &Path, learned: &Learned) -> Result<(), StateError> {
    let err = |source| StateError::Write {
        path: path.to_path_buf(),
        source,
    };
    let snapshot = Snapshot {
        format: FORMAT.to_string(),
        saved_at_unix_seconds: now(),
        learned: learned.clone(),
    };
    let json = serde_json::to_vec(&snapshot).map_err(|e| err(std::io::Error::other(e)))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(&json)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        // Persist the rename itself.
        File::open(&dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        err(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Observation, observe};
    use crate::policy::embedded_default;

    fn some_learning() -> Learned {
        let p = embedded_default().unwrap();
        let mut l = Learned::default();
        observe(
            &p,
            &mut l,
            &Observation {
                id: Some("pod-1".into()),
                gpu_count: 2,
                job_type: "train-bert".into(),
                gpu_class: "A100-80GB".into(),
                runtime_seconds: 12_345.5,
                colocated_job_types: vec!["train-resnet".into()],
            },
        );
        l.exploration.record(true, 200);
        l.exploration.record(false, 200);
        l
    }

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert!(load(&path).unwrap().is_none());
        let l = some_learning();
        save(&path, &l).unwrap();
        assert_eq!(load(&path).unwrap(), Some(l.clone()));
        // Overwrite in place; no temp files left behind.
        save(&path, &Learned::default()).unwrap();
        assert_eq!(load(&path).unwrap(), Some(Learned::default()));
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["state.json"]);
    }

    #[test]
    fn corrupt_snapshots_are_reported_and_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        for bad in [
            "{not json".to_string(),
            r#"{"format":"something-else","savedAtUnixSeconds":0,"learned":{"runtimes":{"by_job":{}},"interference":{"pairs":{}},"exploration":{"recent":[],"explored":0}}}"#.to_string(),
            String::from_utf8(vec![0xff, 0xfe]).unwrap_or_default(),
        ] {
            fs::write(&path, &bad).unwrap();
            assert!(matches!(load(&path), Err(StateError::Corrupt { .. })), "{bad}");
            assert!(load_or_report(&path).is_none());
            // Moved aside for inspection; the next snapshot can be written.
            assert!(!path.exists());
            assert!(dir.path().join("state.json.corrupt").exists());
        }
        save(&path, &some_learning()).unwrap();
        assert!(load_or_report(&path).is_some());
    }

    #[test]
    fn unwritable_location_is_an_error_not_a_panic() {
        let e = save(
            Path::new("/nonexistent-dir/state.json"),
            &Learned::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent-dir/state.json"), "{e}");
    }
}
