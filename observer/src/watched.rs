//! A store kept current by a watch (kube::runtime's watcher and reflector): how the observer's leader
//! loops read what they watch instead of listing it each round. A lost watch keeps its store as last seen
//! and is retried with kube's backoff; each error is logged and counted (`observer_watch_errors_total`).

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::{FutureExt, Stream, StreamExt, TryStreamExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use tokio::task::AbortHandle;

use crate::metrics::Metrics;

/// Runs `stream` into a new store; `before` sees each event and a lookup of the store as it was before the
/// event. Abort the handle to stop the watch.
pub fn spawn<K>(
    stream: impl Stream<Item = watcher::Result<Event<K>>> + Send + 'static,
    dyntype: K::DynamicType,
    resource: &str,
    metrics: Arc<Metrics>,
    before: impl Fn(&Event<K>, &dyn Fn(&K) -> Option<Arc<K>>) + Send + 'static,
) -> (Store<K>, AbortHandle)
where
    K: kube::Resource + Clone + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let writer = reflector::store::Writer::new(dyntype.clone());
    let reader = writer.as_reader();
    let old = reader.clone();
    let resource = resource.to_string();
    let task = stream
        .default_backoff()
        .map_ok(move |event| {
            before(&event, &|o: &K| {
                old.get(&ObjectRef::from_obj_with(o, dyntype.clone()))
            });
            event
        })
        .reflect(writer)
        .for_each(move |event| {
            if let Err(err) = event {
                tracing::warn!(%resource, %err, "watch failed; its store is kept as last seen and the watch retried");
                metrics.watch_error(&resource);
            }
            std::future::ready(())
        });
    (reader, tokio::spawn(task).abort_handle())
}

/// Whether the store has been filled by its first list.
pub fn ready<K>(store: &Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}
