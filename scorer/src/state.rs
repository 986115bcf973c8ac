//! Persistence of the learned state: a snapshot written atomically (temp file in the same directory,
//! fsync, rename, fsync of the directory), so a crash leaves either the old or the new snapshot, never
//! half of one. A snapshot that cannot be read at start is reported, moved aside to `<path>.corrupt`, and
//! ignored: the scorer starts from the policy's priors.
//!
//! Format v3 (this one) is gzip-compressed JSON of sufficient statistics (per (job type, class) and per
//! pair), the de-duplication window and the unlisted job types; its size is bounded whatever the number of
//! observations (docs/measurements/2026-11-25-learned-state-size.md). Format v2 (plain JSON, written by
//! older scorers) still loads and imports: its statistics are the same, its 128-bit ids are cut to the
//! last 10 000 of 64 bits.
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::Learned;

/// Identifies the snapshot format; bumped on incompatible changes.
pub const FORMAT: &str = "gpu-admission-scorer-state/v3";
/// The previous format, still read.
pub const FORMAT_V2: &str = "gpu-admission-scorer-state/v2";
/// Largest decompressed snapshot read (a guard against a decompression bomb; a bounded state is far less).
const MAX_DECODED_BYTES: u64 = 64 * 1024 * 1024;

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
    decode(&bytes).map(Some).map_err(corrupt)
}

/// Reads a snapshot of format v3 (gzip) or v2 (plain JSON).
fn decode(bytes: &[u8]) -> Result<Learned, String> {
    use std::io::Read;
    let json = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .take(MAX_DECODED_BYTES + 1)
            .read_to_end(&mut out)
            .map_err(|e| format!("not gzip: {e}"))?;
        if out.len() as u64 > MAX_DECODED_BYTES {
            return Err(format!(
                "decompresses to more than {MAX_DECODED_BYTES} bytes"
            ));
        }
        out
    } else {
        bytes.to_vec()
    };
    let snapshot: Snapshot = serde_json::from_slice(&json).map_err(|e| e.to_string())?;
    if snapshot.format != FORMAT && snapshot.format != FORMAT_V2 {
        return Err(format!(
            "format `{}`, expected `{FORMAT}` (or `{FORMAT_V2}`)",
            snapshot.format
        ));
    }
    check_bounds(&snapshot.learned)?;
    Ok(snapshot.learned)
}

/// The snapshot of `learned` in format v3.
fn encode(learned: &Learned) -> Result<Vec<u8>, serde_json::Error> {
    use std::io::Write;
    let json = serde_json::to_vec(&Snapshot {
        format: FORMAT.to_string(),
        saved_at_unix_seconds: now(),
        learned: learned.clone(),
    })?;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&json).map_err(serde_json::Error::io)?;
    gz.finish().map_err(serde_json::Error::io)
}

/// Encodes the learned state for another replica (`ExportState`): the snapshot format without this
/// replica's exploration window.
pub fn encode_shared(learned: &Learned) -> Result<Vec<u8>, serde_json::Error> {
    encode(&Learned {
        exploration: Default::default(),
        ..learned.clone()
    })
}

/// Decodes what [`encode_shared`] wrote (or an older scorer's v2 export).
pub fn decode_shared(bytes: &[u8]) -> Result<Learned, String> {
    decode(bytes)
}

/// Most job types a state may hold statistics of: any policy's listed ones (the policy crate bounds a
/// policy's size) plus the unlisted budget.
const MAX_JOB_ENTRIES: usize = 4096 + crate::model::unlisted::BUDGET;
/// Most GPU classes one job type may have statistics on.
const MAX_CLASSES_PER_JOB: usize = 256;
/// Largest |mean| of a learned ln-runtime (or slowdown) accepted: e^60 s is far past any run.
const MAX_ABS_MEAN: f64 = 60.0;

/// Checks a state that came from outside this process (`ImportState`, a snapshot on disk) against every
/// bound the model keeps itself, and its observation count against the evidence it carries: every count,
/// every "last seen" sequence number and the remembered ids fit within it. A state that breaks one is
/// refused whole: the sender's numbers are never adopted on its word.
pub fn check_bounds(l: &Learned) -> Result<(), String> {
    use crate::model::{interference, observed, unlisted};
    let n = l.observations;
    let over = |what: &str, got: usize, max: usize| {
        (got > max)
            .then(|| format!("{what}: {got}, at most {max}"))
            .map_or(Ok(()), Err)
    };
    over(
        "unlisted job types",
        l.unlisted.seen.len(),
        unlisted::BUDGET,
    )?;
    over("remembered ids", l.observed.len(), observed::CAPACITY)?;
    over(
        "co-location pairs",
        l.interference.len(),
        interference::MAX_PAIRS,
    )?;
    over(
        "job types with runtimes",
        l.runtimes.by_job.len(),
        MAX_JOB_ENTRIES,
    )?;
    over("job type owners", l.owners.0.len(), MAX_JOB_ENTRIES)?;
    over(
        "GPU classes with contention",
        l.contention.by_class.len(),
        MAX_CLASSES_PER_JOB,
    )?;
    if l.observed.len() as u64 > n {
        return Err(format!(
            "{} ids remembered of {n} observations",
            l.observed.len()
        ));
    }
    let mut runs: u64 = 0;
    for (job, classes) in &l.runtimes.by_job {
        over(
            &format!("GPU classes of {job}"),
            classes.len(),
            MAX_CLASSES_PER_JOB,
        )?;
        for (class, stat) in classes {
            check_stat(stat, n).map_err(|e| format!("runtimes of {job} on {class}: {e}"))?;
            // Σ ln g of its runs: each in [0, ln u32::MAX] (the wire's GPU count).
            let most = stat.count as f64 * f64::from(u32::MAX).ln();
            if !(0.0..=most).contains(&stat.log_gpus()) {
                return Err(format!(
                    "runtimes of {job} on {class}: GPU counts {} of {} runs",
                    stat.log_gpus(),
                    stat.count
                ));
            }
            runs = runs.saturating_add(stat.count);
        }
    }
    if let Some(job) = l
        .runtimes
        .sizes
        .keys()
        .find(|j| !l.runtimes.by_job.contains_key(*j))
    {
        return Err(format!("GPU-count sums of {job}, which has no runtimes"));
    }
    if runs > n {
        return Err(format!("{runs} runs learned of {n} observations"));
    }
    for table in [&l.interference.pairs, &l.interference.directed] {
        for (a, neighbours) in table {
            for (b, stat) in neighbours {
                check_stat(stat, n).map_err(|e| format!("pair {a}, {b}: {e}"))?;
            }
        }
    }
    for (class, sums) in &l.contention.by_class {
        if sums.count > n || sums.square < 0 {
            return Err(format!(
                "contention on {class}: {sums:?} of {n} observations"
            ));
        }
    }
    for (job, seen) in &l.unlisted.seen {
        if seen.last > n || usize::from(seen.workload) >= crate::policy::WorkloadClass::ALL.len() {
            return Err(format!(
                "unlisted job type {job}: {seen:?} of {n} observations"
            ));
        }
    }
    Ok(())
}

fn check_stat(stat: &crate::model::estimate::Stat, n: u64) -> Result<(), String> {
    if stat.count > n || stat.last > n {
        return Err(format!("{stat:?} of {n} observations"));
    }
    if stat.weight.is_some_and(|w| w <= 0) {
        return Err(format!("{stat:?}: a weight must be positive"));
    }
    let mean = stat.mean();
    if !mean.is_finite() || mean.abs() > MAX_ABS_MEAN {
        return Err(format!("{stat:?}: mean {mean}"));
    }
    Ok(())
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
    let json = encode(learned).map_err(|e| err(std::io::Error::other(e)))?;
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
                workload_class: None,
                gpu_class: "A100-80GB".into(),
                runtime_seconds: 12_345.5,
                colocated_job_types: vec!["train-resnet".into()],
                ..Observation::default()
            },
        );
        l.exploration.record(true, -0.25, 200);
        l.exploration.record(false, 0.5, 200);
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
    fn a_v2_snapshot_of_an_older_scorer_still_loads_and_imports() {
        let v2 = include_bytes!("../tests/fixtures/state-v2.json");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        fs::write(&path, v2).unwrap();
        let l = load(&path).unwrap().unwrap();
        assert_eq!(l.observations, 5);
        assert_eq!(l.runtimes.get("train-bert", "A100-80GB").count, 3);
        assert!((l.runtimes.get("train-bert", "A100-80GB").mean() - 9.5).abs() < 1e-9);
        assert_eq!(l.interference.get("notebook", "batch-etl").count, 4);
        assert_eq!(l.observed.len(), 2);
        assert_eq!(l.exploration.len(), 2);
        // The same bytes through ImportState's decoder; written back, it is v3 (gzip) and equal.
        let imported = decode_shared(v2).unwrap();
        assert_eq!(imported, l);
        save(&path, &l).unwrap();
        assert_eq!(&fs::read(&path).unwrap()[..2], &[0x1f, 0x8b]);
        assert_eq!(load(&path).unwrap().unwrap(), l);
    }

    #[test]
    fn the_largest_state_the_bounds_allow_is_far_inside_a_configmap() {
        // Every bound full: 10 listed + 512 unlisted job types on every class, 2 048 pairs, 10 000 ids,
        // an owner per job type, counts and sums as after millions of observations. (The growth curve: `--example state_size`.)
        use crate::model::{interference, observed, unlisted};
        let p = embedded_default().unwrap();
        let mut l = Learned::default();
        let mut names: Vec<String> = p.job_types.iter().map(|j| j.name.clone()).collect();
        // Per-tenant learning: every other unlisted name is a tenant's own name for another tenant's job
        // type, and every job type has an owner (namespaces of 40 bytes, 500 tenants).
        let namespace = |k: usize| format!("tenant-{:03}-{}", k % 500, "n".repeat(29));
        for k in 0..unlisted::BUDGET {
            let base = format!("team-{k:04}-some-job-type-name");
            l.owners.0.insert(base.clone(), namespace(k));
            let name = if k % 2 == 0 {
                base
            } else {
                format!("{base}@{}", namespace(k + 1))
            };
            l.unlisted.touch(&name, None, k as u64 + 1, |_| None);
            names.push(name);
        }
        for (k, j) in p.job_types.iter().enumerate() {
            l.owners.0.insert(j.name.clone(), namespace(k + 7));
        }
        for (k, name) in names.iter().enumerate() {
            for c in &p.classes {
                let cell = l
                    .runtimes
                    .by_job
                    .entry(name.clone())
                    .or_default()
                    .entry(c.name.clone())
                    .or_default();
                cell.count = 1_000_003 + k as u64;
                cell.sum = 9_123_456_789_012_345 + k as i64;
                cell.log_gpus = 3_123_456_789_012_345 + k as i64;
            }
            // Runs on several GPU counts: the sums that teach the job type its own exponent.
            l.runtimes.sizes.insert(
                name.clone(),
                crate::model::estimate::SizeSums {
                    square: 5_123_456_789_012_345 + k as i64,
                    product: 47_123_456_789_012_345 + k as i64,
                },
            );
        }
        for k in 0..interference::MAX_PAIRS {
            let (a, b) = (&names[k % names.len()], &names[(k * 7 + 1) % names.len()]);
            // Weighted, so every pair carries its sum of weights too.
            l.interference.record_weighted(
                a,
                b,
                0.1 + k as f64 / 1e4,
                0.123_456_789 + k as f64 / 1e5,
                5_000_000 + k as u64,
            );
        }
        for i in 0..2 * observed::CAPACITY {
            l.observed
                .insert(&format!("0b6c1c62-5d1a-4bd0-9d0e-{i:012}"));
        }
        // Consistent with the counts above (ImportState checks them against it).
        l.observations = 10_000_000_000;
        let bytes = encode_shared(&l).unwrap();
        eprintln!("largest state: {} bytes", bytes.len());
        assert!(bytes.len() <= 256 * 1024, "{} bytes", bytes.len());
        assert_eq!(decode_shared(&bytes).unwrap(), l);
    }

    /// A state from outside is held to the model's own bounds and its count to the evidence it carries:
    /// one broken bound refuses the whole state.
    #[test]
    fn a_state_that_breaks_a_bound_is_refused_whole() {
        let good = some_learning();
        assert!(check_bounds(&good).is_ok());
        let refused = |what: &str, forge: &dyn Fn(&mut Learned)| {
            let mut l = good.clone();
            forge(&mut l);
            let bytes = encode_shared(&l).unwrap();
            let e = decode_shared(&bytes).expect_err(what);
            eprintln!("{what}: {e}");
        };
        refused("a count below its runs", &|l| l.observations = 0);
        refused("a run counted beyond the observations", &|l| {
            let cell = l.runtimes.by_job.get_mut("train-bert").unwrap();
            cell.get_mut("A100-80GB").unwrap().count = 1_000;
        });
        refused("a mean of e^1000 seconds", &|l| {
            let cell = l.runtimes.by_job.get_mut("train-bert").unwrap();
            cell.get_mut("A100-80GB").unwrap().sum = i64::MAX;
        });
        refused("negative GPU counts", &|l| {
            let cell = l.runtimes.by_job.get_mut("train-bert").unwrap();
            cell.get_mut("A100-80GB").unwrap().log_gpus = -1;
        });
        refused("GPU-count sums of a job type without runtimes", &|l| {
            l.runtimes.sizes.insert("ghost".into(), Default::default());
        });
        refused("a negative weight", &|l| {
            let cell = l.runtimes.by_job.get_mut("train-bert").unwrap();
            cell.get_mut("A100-80GB").unwrap().weight = Some(-5);
        });
        refused("more unlisted job types than the budget", &|l| {
            l.observations = 1_000_000;
            for k in 0..=crate::model::unlisted::BUDGET {
                l.unlisted.seen.insert(
                    format!("forged-{k}"),
                    crate::model::unlisted::Seen {
                        workload: 0,
                        last: 1,
                    },
                );
            }
        });
        refused("more pairs than the table keeps", &|l| {
            l.observations = 1_000_000;
            for k in 0..=crate::model::interference::MAX_PAIRS {
                l.interference
                    .pairs
                    .entry(format!("a-{k}"))
                    .or_default()
                    .insert("b".into(), Default::default());
            }
        });
        // And through the service: `ImportState` answers invalid_argument and keeps its own state.
        let store = std::sync::Arc::new(crate::policy::watch::PolicyStore::new(Some(
            embedded_default().unwrap(),
        )));
        let metrics = std::sync::Arc::new(crate::metrics::Metrics::unregistered());
        let service = crate::service::Core::new(store, good.clone(), metrics);
        let mut forged = good.clone();
        forged.observations = u64::MAX;
        forged
            .runtimes
            .by_job
            .get_mut("train-bert")
            .unwrap()
            .get_mut("A100-80GB")
            .unwrap()
            .sum = i64::MAX;
        let incoming = gpu_admission_proto::scorer::v1::LearnedState {
            snapshot: encode_shared(&forged).unwrap(),
            observations: u64::MAX,
            digest: String::new(),
        };
        assert!(service.import_state(&incoming).is_err());
        assert_eq!(
            service.export_state().unwrap().observations,
            good.observations
        );
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
