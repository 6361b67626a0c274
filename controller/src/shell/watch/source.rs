//! Where a watch gets its objects: the API server through kube's `Api`, or a script
//! in the tests. The watch loop ([`super::driver`]) speaks to this seam only, so
//! every recovery rule is tested without a server.

use std::fmt::Debug;
use std::future::Future;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::{ListParams, ObjectList, WatchEvent, WatchParams};
use kube::runtime::watcher;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// A watch's event stream.
pub(super) type Events<K> = BoxStream<'static, Result<WatchEvent<K>, kube::Error>>;

/// The list and watch calls of one resource.
pub(super) trait Source<K: Clone>: Send + Sync {
    /// One page of a consistent list (`continue_token` from the previous page).
    fn list(
        &self,
        continue_token: Option<String>,
    ) -> impl Future<Output = Result<ObjectList<K>, kube::Error>> + Send;

    /// A watch with bookmarks, from `version`; with `initial_events`, a streaming
    /// list first (`sendInitialEvents`: the current objects as ADDED events, then a
    /// bookmark annotated `k8s.io/initial-events-end`).
    fn watch(
        &self,
        version: &str,
        initial_events: bool,
    ) -> impl Future<Output = Result<Events<K>, kube::Error>> + Send;

    /// How long a watch may stay silent before its connection counts as dead: the
    /// server ends every watch at its timeout (with a bookmark), so silence past it
    /// means the connection died without a close.
    fn idle_limit(&self) -> std::time::Duration;
}

/// The API server.
pub(super) struct KubeSource<K> {
    pub(super) api: Api<K>,
    pub(super) config: watcher::Config,
}

/// The server's default watch timeout (kube's too), when the config sets none.
const DEFAULT_TIMEOUT_SECS: u32 = 290;

impl<K> Source<K> for KubeSource<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    async fn list(&self, continue_token: Option<String>) -> Result<ObjectList<K>, kube::Error> {
        // No resourceVersion: a consistent read, so a re-list never goes back in time.
        let params = ListParams {
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            limit: self.config.page_size,
            continue_token,
            ..ListParams::default()
        };
        self.api.list(&params).await
    }

    async fn watch(&self, version: &str, initial_events: bool) -> Result<Events<K>, kube::Error> {
        let params = WatchParams {
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            timeout: Some(self.config.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS)),
            // Bookmarks keep the resume version fresh on quiet resources, so a resume
            // after a long quiet spell is still inside the server's history.
            bookmarks: true,
            send_initial_events: initial_events,
        };
        Ok(self.api.watch(&params, version).await?.boxed())
    }

    fn idle_limit(&self) -> std::time::Duration {
        let timeout = self.config.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS);
        std::time::Duration::from_secs(u64::from(timeout) + 5)
    }
}
