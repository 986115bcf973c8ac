//! `POST /mutate-pod-checkpoint`: Pods of a Job start from the checkpoint images of a matching
//! CheckpointBackup (`migration.dcnlab.com/v1`, the stateful-migration operator's resource), so a migrated or
//! restarted job resumes instead of starting over.
//!
//! `decision` is the pure rule set (Pod + Job facts + backups → patch); `handler` does the I/O (caches, the
//! Job lookup, metrics, logs). Any Pod, GPU or not; always allowed; without the CRD (or with `--no-kube`)
//! every Pod is allowed unchanged.

pub mod decision;
pub mod handler;

pub use decision::{ANN_ORIGINAL_IMAGES, ANN_RESTORED_FROM};
