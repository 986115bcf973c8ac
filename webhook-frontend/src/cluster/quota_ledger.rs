//! The quota ledgers' I/O ([`gpu_admission_core::quota::ledger`] holds their rules, and
//! [`gpu_admission_core::quota::ledger::object`] their stored form): one `QuotaLedger` per quota'd tier in the
//! frontend's namespace, created here when missing, holding the tier's admitted quota'd Pods no watch may
//! have seen. Written with the version last known (`metadata.resourceVersion`): a conflict means another
//! replica admitted in that tier in between (or the object was deleted), and the admission decides again on
//! the version the watch of the ledgers brought, else on a fresh read.
use futures::Stream;
use gpu_admission_core::quota::ledger::object::{QuotaLedger, object_name};
use gpu_admission_core::quota::ledger::{Entry, Limited};
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};

/// A tier's ledger as last read or written: its entries and the version to write on top of.
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
    /// Over a `max` only by headroom other replicas were granted, still unclosed at the deadline.
    HeldByGrants,
}

impl std::fmt::Display for LedgerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LedgerError::Conflict => write!(f, "the ledger changed while we wrote it"),
            LedgerError::Api(e) => write!(f, "{e}"),
            LedgerError::Contended => write!(f, "the ledger is contended by other admissions"),
            LedgerError::Limited(l) => write!(f, "{l}"),
            LedgerError::HeldByGrants => write!(
                f,
                "the quota's last headroom is granted to another frontend replica for about a second"
            ),
        }
    }
}

/// The ledger objects of one frontend installation.
#[derive(Clone)]
pub(crate) struct LedgerStore {
    api: Api<QuotaLedger>,
}

impl LedgerStore {
    /// The ledgers in the client's namespace (in a Pod: its service account's).
    pub(crate) fn new(client: kube::Client) -> Self {
        Self {
            api: Api::default_namespaced(client),
        }
    }

    /// Every ledger object of the namespace as it changes (list, then watch; retried with backoff).
    pub(crate) fn watch(
        &self,
    ) -> impl Stream<Item = Result<watcher::Event<QuotaLedger>, watcher::Error>> + Send + use<>
    {
        watcher(self.api.clone(), watcher::Config::default()).default_backoff()
    }

    /// Reads `tier`'s ledger; a missing object is an empty ledger to create.
    pub(crate) async fn read(&self, tier: &str) -> Result<LedgerVersion, LedgerError> {
        let name = object_name(tier);
        let stored = (self.api.get_opt(&name).await)
            .map_err(|e| LedgerError::Api(format!("reading QuotaLedger {name}: {e}")))?;
        let Some(stored) = stored else {
            return Ok(LedgerVersion::default());
        };
        let entries = stored.entries_of(tier).map_err(|e| {
            LedgerError::Api(format!("QuotaLedger {name} holds no list of entries: {e}"))
        })?;
        Ok(LedgerVersion {
            resource_version: stored.metadata.resource_version,
            entries,
        })
    }

    /// Writes `entries` as `tier`'s ledger on top of `on` (created when `on` has no version); the new version
    /// on success.
    pub(crate) async fn write(
        &self,
        tier: &str,
        on: &LedgerVersion,
        entries: Vec<Entry>,
    ) -> Result<LedgerVersion, LedgerError> {
        let object = QuotaLedger::new(tier, &entries, on.resource_version.clone())
            .map_err(|e| LedgerError::Api(format!("encoding the ledger: {e}")))?;
        let name = object_name(tier);
        let pp = PostParams::default();
        let written = match on.resource_version {
            Some(_) => self.api.replace(&name, &pp, &object).await,
            None => self.api.create(&pp, &object).await,
        };
        match written {
            Ok(stored) => Ok(LedgerVersion {
                resource_version: stored.metadata.resource_version,
                entries,
            }),
            // 409: a stale version on replace, or another replica created it first; 404 on replace: the object
            // was deleted since.
            Err(kube::Error::Api(e))
                if e.code == 409 || (e.code == 404 && on.resource_version.is_some()) =>
            {
                Err(LedgerError::Conflict)
            }
            Err(e) => Err(LedgerError::Api(format!("writing QuotaLedger {name}: {e}"))),
        }
    }
}
