//! The quota ledger's I/O ([`gpu_admission_core::quota::ledger`] holds its rules): one ConfigMap,
//! `gpu-admission-quota-ledger` in the frontend's namespace (shipped empty in deploy/kustomize/base; created
//! here when missing), whose `entries` key is the JSON list of admitted quota'd Pods no watch may have seen.
//! Written with the version last read (`metadata.resourceVersion`): a conflict means another replica admitted
//! in between, and the admission reads and decides again.
use gpu_admission_core::quota::ledger::{Entry, Limited};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};

/// The ConfigMap's name.
pub(crate) const LEDGER_NAME: &str = "gpu-admission-quota-ledger";
const ENTRIES_KEY: &str = "entries";

/// The ledger as last read or written: its entries and the version to write on top of.
#[derive(Debug, Clone, Default)]
pub(crate) struct LedgerVersion {
    /// `None`: the object does not exist (yet).
    pub(crate) resource_version: Option<String>,
    pub(crate) entries: Vec<Entry>,
}

/// Why the ledger could not be written.
#[derive(Debug)]
pub(crate) enum LedgerError {
    /// Another replica wrote first: read again.
    Conflict,
    /// The API refused or failed (RBAC, network, a ledger we cannot read).
    Api(String),
    /// Still conflicting after every attempt (replicas admitting faster than the ledger takes writes).
    Contended,
    /// The namespace is over its own rate limit of reservations (core's message says which and how long).
    Limited(Limited),
}

impl std::fmt::Display for LedgerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LedgerError::Conflict => write!(f, "the ledger changed while we wrote it"),
            LedgerError::Api(e) => write!(f, "{e}"),
            LedgerError::Contended => write!(f, "the ledger is contended by other admissions"),
            LedgerError::Limited(l) => write!(f, "{l}"),
        }
    }
}

/// The ledger object of one frontend installation.
#[derive(Clone)]
pub(crate) struct LedgerStore {
    api: Api<ConfigMap>,
}

impl LedgerStore {
    /// The ledger in the client's namespace (in a Pod: its service account's).
    pub(crate) fn new(client: kube::Client) -> Self {
        Self {
            api: Api::default_namespaced(client),
        }
    }

    /// Reads the ledger; a missing object is an empty ledger to create.
    pub(crate) async fn read(&self) -> Result<LedgerVersion, LedgerError> {
        let cm = self
            .api
            .get_opt(LEDGER_NAME)
            .await
            .map_err(|e| LedgerError::Api(format!("reading ConfigMap {LEDGER_NAME}: {e}")))?;
        let Some(cm) = cm else {
            return Ok(LedgerVersion::default());
        };
        let entries = match cm.data.as_ref().and_then(|d| d.get(ENTRIES_KEY)) {
            None => Vec::new(),
            Some(json) => serde_json::from_str(json).map_err(|e| {
                LedgerError::Api(format!("ConfigMap {LEDGER_NAME} is not a ledger: {e}"))
            })?,
        };
        Ok(LedgerVersion {
            resource_version: cm.metadata.resource_version,
            entries,
        })
    }

    /// Writes `entries` on top of `on` (created when `on` has no version); the new version on success.
    pub(crate) async fn write(
        &self,
        on: &LedgerVersion,
        entries: Vec<Entry>,
    ) -> Result<LedgerVersion, LedgerError> {
        let json = serde_json::to_string(&entries)
            .map_err(|e| LedgerError::Api(format!("encoding the ledger: {e}")))?;
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(LEDGER_NAME.to_string()),
                resource_version: on.resource_version.clone(),
                labels: Some(
                    [(
                        "app.kubernetes.io/name".to_string(),
                        "gpu-admission-webhook".to_string(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            data: Some([(ENTRIES_KEY.to_string(), json)].into()),
            ..Default::default()
        };
        let pp = PostParams::default();
        let written = match on.resource_version {
            Some(_) => self.api.replace(LEDGER_NAME, &pp, &cm).await,
            None => self.api.create(&pp, &cm).await,
        };
        match written {
            Ok(cm) => Ok(LedgerVersion {
                resource_version: cm.metadata.resource_version,
                entries,
            }),
            // 409: a stale version on replace, or another replica created it first.
            Err(kube::Error::Api(e)) if e.code == 409 => Err(LedgerError::Conflict),
            Err(e) => Err(LedgerError::Api(format!(
                "writing ConfigMap {LEDGER_NAME}: {e}"
            ))),
        }
    }
}
