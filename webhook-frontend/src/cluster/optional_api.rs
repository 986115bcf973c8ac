//! A watch cache of a resource whose API may not be served (a CRD not installed yet, a Kubernetes without
//! DRA): [`OptionalCache`] answers "not served", logs that once, and looks for the API again in the
//! background every `discovery_interval`; once it is served it starts a watch. When the API goes away later
//! the watch fails with 404 and the cache goes back to "not served". A 403 (RBAC) is handled the same way,
//! with its own log line, so a missing grant never makes the frontend unready.

use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;

/// Where the API stands in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ApiState {
    /// Discovery has not answered yet.
    Unknown = 0,
    /// The API is not served (or listing it is forbidden).
    NotServed = 1,
    /// Served; the first listing is under way.
    Syncing = 2,
    /// Served and cached.
    Synced = 3,
}

impl ApiState {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => ApiState::NotServed,
            2 => ApiState::Syncing,
            3 => ApiState::Synced,
            _ => ApiState::Unknown,
        }
    }
}

/// Which API to look for, and what its absence means (for the log lines).
#[derive(Clone, Copy, Debug)]
pub(crate) struct OptionalApi {
    /// `group/version`, e.g. `resource.k8s.io/v1`.
    pub(crate) group_version: &'static str,
    /// The resource's plural name, e.g. `resourceclaimtemplates`.
    pub(crate) plural: &'static str,
    /// The kind, e.g. `ResourceClaimTemplate`, and what provides it, e.g. `DRA API`, for the log lines.
    pub(crate) kind: &'static str,
    pub(crate) provider: &'static str,
    /// What happens while it is not cached, e.g. `Pods are admitted without restore`.
    pub(crate) meanwhile: &'static str,
}

/// The cached objects of an [`OptionalApi`].
pub(crate) struct OptionalCache<K>
where
    K: kube::Resource<DynamicType = ()> + 'static,
{
    store: Arc<RwLock<Option<Store<K>>>>,
    state: Arc<AtomicU8>,
    changes: Changes,
}

/// What the background loop shares with its [`OptionalCache`]: the store's slot, the state, the changes.
type Shared<K> = (Arc<RwLock<Option<Store<K>>>>, Arc<AtomicU8>, Changes);

/// Where the watched objects changed since [`Changes::take`] was last asked: their namespaces, and whether a
/// cluster-scoped one did. What a count read from them is then stale.
#[derive(Clone, Default)]
pub(crate) struct Changes(Arc<std::sync::Mutex<(std::collections::BTreeSet<String>, bool)>>);

impl Changes {
    fn note(&self, namespace: Option<&str>) {
        let mut c = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match namespace {
            Some(ns) => {
                c.0.insert(ns.to_string());
            }
            None => c.1 = true,
        }
    }

    /// The namespaces changed, and whether anything cluster-scoped did, since the last call.
    pub(crate) fn take(&self) -> (std::collections::BTreeSet<String>, bool) {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl<K> OptionalCache<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Starts the discovery/watch loop in a background task.
    pub(crate) fn start(
        client: kube::Client,
        api: OptionalApi,
        discovery_interval: Duration,
    ) -> Self {
        let store = Arc::new(RwLock::new(None));
        let state = Arc::new(AtomicU8::new(ApiState::Unknown as u8));
        let changes = Changes::default();
        tokio::spawn(keep::<K>(
            client,
            api,
            (store.clone(), state.clone(), changes.clone()),
            discovery_interval,
        ));
        Self {
            store,
            state,
            changes,
        }
    }

    /// Where the objects changed since last asked.
    pub(crate) fn changes(&self) -> &Changes {
        &self.changes
    }

    pub(crate) fn state(&self) -> ApiState {
        ApiState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Ready when the objects are listed, or known to be absent (or forbidden).
    pub(crate) fn is_ready(&self) -> bool {
        matches!(self.state(), ApiState::NotServed | ApiState::Synced)
    }

    /// The store, once the first listing is complete.
    pub(crate) fn synced_store(&self) -> Option<Store<K>> {
        if self.state() != ApiState::Synced {
            return None;
        }
        self.store.read().ok()?.clone()
    }
}

fn status_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Is the API served with the resource? `Ok(false)` when the group/version is not served.
async fn served(client: &kube::Client, api: &OptionalApi) -> Result<bool, kube::Error> {
    match client.list_api_group_resources(api.group_version).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == api.plural)),
        Err(err) if status_code(&err) == Some(404) => Ok(false),
        Err(err) => Err(err),
    }
}

/// Why a watch ended.
enum WatchEnd {
    /// 404: the API went away (or discovery was stale).
    NotFound,
    /// 403: RBAC does not let us list it.
    Forbidden,
}

/// Discovery → watch → (404 / 403) → discovery ..., forever. Each condition ("not served", "forbidden", a
/// discovery error) is logged when it starts, not on every retry.
async fn keep<K>(
    client: kube::Client,
    api: OptionalApi,
    (slot, state, changes): Shared<K>,
    discovery_interval: Duration,
) where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let mut last: Option<String> = None;
    loop {
        let condition = match served(&client, &api).await {
            Ok(true) => {
                let synced = watch_while_served::<K>(&client, api, &slot, &state, &changes).await;
                if synced.0 {
                    last = None; // it worked for a while: whatever comes next is news
                }
                match synced.1 {
                    WatchEnd::NotFound => "not served".to_string(),
                    WatchEnd::Forbidden => "forbidden".to_string(),
                }
            }
            Ok(false) => "not served".to_string(),
            Err(err) => format!("discovery of {} failed: {err}", api.group_version),
        };
        state.store(ApiState::NotServed as u8, Ordering::Release);
        if last.as_deref() != Some(condition.as_str()) {
            log_condition(&api, &condition, discovery_interval);
            last = Some(condition);
        }
        tokio::time::sleep(discovery_interval).await;
    }
}

fn log_condition(api: &OptionalApi, condition: &str, discovery_interval: Duration) {
    let (retry_secs, kind, provider, plural, meanwhile) = (
        discovery_interval.as_secs_f64(),
        api.kind,
        api.provider,
        api.plural,
        api.meanwhile,
    );
    let group = api.group_version.split('/').next().unwrap_or_default();
    match condition {
        "not served" => tracing::info!(
            retry_secs,
            "{kind} {provider} ({plural}.{group}) not installed: {meanwhile}; looking for it again in the \
             background"
        ),
        "forbidden" => tracing::warn!(
            retry_secs,
            "listing {plural}.{group} is forbidden (grant list and watch): {meanwhile}"
        ),
        other => tracing::warn!(retry_secs, "{other}; {meanwhile}"),
    }
}

/// Fills a fresh store until the API answers 404 or 403; whether it synced, and why it ended.
async fn watch_while_served<K>(
    client: &kube::Client,
    api: OptionalApi,
    slot: &RwLock<Option<Store<K>>>,
    state: &Arc<AtomicU8>,
    changes: &Changes,
) -> (bool, WatchEnd)
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    state.store(ApiState::Syncing as u8, Ordering::Release);
    let (reader, writer) = reflector::store();
    if let Ok(mut s) = slot.write() {
        *s = Some(reader.clone());
    }
    let synced = Arc::new(AtomicBool::new(false));
    let (ready_state, ready_flag) = (state.clone(), synced.clone());
    let ready = tokio::spawn(async move {
        if reader.wait_until_ready().await.is_ok() {
            ready_flag.store(true, Ordering::Release);
            let _ = ready_state.compare_exchange(
                ApiState::Syncing as u8,
                ApiState::Synced as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            tracing::info!(objects = reader.len(), "{} cache synced", api.kind);
        }
    });
    let end = watch::<K>(client, api.plural, writer, changes).await;
    ready.abort();
    if let Ok(mut s) = slot.write() {
        *s = None;
    }
    (synced.load(Ordering::Acquire), end)
}

/// Keeps the store filled until the API answers 404 or 403.
async fn watch<K>(
    client: &kube::Client,
    plural: &'static str,
    writer: reflector::store::Writer<K>,
    changes: &Changes,
) -> WatchEnd
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let stream = watcher(
        Api::<K>::all(client.clone()),
        watcher::Config::default().any_semantic(),
    )
    .default_backoff()
    .reflect(writer);
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        let err = match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => {
                changes.note(o.meta().namespace.as_deref());
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                changes.note(None);
                continue;
            }
            Ok(_) => continue,
            Err(watcher::Error::InitialListFailed(err) | watcher::Error::WatchStartFailed(err)) => {
                err
            }
            Err(other) => {
                tracing::warn!(err = %other, resource = plural, "watch error (retrying with backoff)");
                continue;
            }
        };
        match status_code(&err) {
            Some(404) => return WatchEnd::NotFound,
            Some(403) => return WatchEnd::Forbidden,
            _ => tracing::warn!(%err, resource = plural, "watch error (retrying with backoff)"),
        }
    }
    WatchEnd::NotFound // the stream never ends on its own
}
