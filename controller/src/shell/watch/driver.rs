//! The watch loop of one resource (ES-1.8): list once, then watch; after a failure,
//! resume from the last resourceVersion seen, and list again only when the API
//! server says that history is gone.
//!
//! The sync signal ([`Shared::mark_listed`] / [`Shared::mark_out_of_sync`]):
//! - *listed* (the store is complete once) is raised by the first complete list and
//!   never lowered: a resumed watch delivers every event after its resourceVersion,
//!   so the store stays a correct picture of some recent moment;
//! - *in sync* (nothing missing beyond the stream's own delay) drops on every
//!   failure and at the start of a re-list, and rises again when a re-list completes
//!   or when a resumed watch delivers its first event or bookmark — proof that the
//!   server accepted the resourceVersion, since an expired one is answered with an
//!   error first. A clean end of a watch (the server's timeout) keeps it: the resume
//!   follows at once, from a bookmark at the end of the stream.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::WatchEvent;
use kube::core::Status;
use kube::{Resource, ResourceExt};
use svcplane_webhook::retry::{Backoff, Outage, wait};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info};

use super::Change;
use super::recovery::{self, Recovery};
use super::reflector::Reflector;
use super::source::{Events, Source};
use crate::shell::cache::{Shared, Store};

/// A watch that ends by itself sooner than this without delivering anything counts
/// as failed, so a server that closes every watch at once is retried with backoff
/// instead of in a tight loop (client-go's "very short watch").
const SHORT_WATCH: Duration = Duration::from_secs(1);

/// The annotation on the bookmark that ends a streaming list's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Why a list or watch stopped.
#[derive(Debug, thiserror::Error)]
pub(super) enum Failure {
    #[error(transparent)]
    Request(#[from] kube::Error),
    #[error("the API server sent an error event: {0}")]
    Event(Box<Status>),
    #[error("the list carried no resourceVersion")]
    NoVersion,
    #[error("no event or bookmark within the watch's timeout; the connection is dead")]
    Idle,
    #[error("the watch ended at once without an event")]
    ShortWatch,
    #[error("the streaming list ended before its last initial event")]
    StreamingListCut,
}

impl Failure {
    fn recovery(&self) -> Recovery {
        match self {
            Failure::Request(e) => recovery::after_error(e),
            Failure::Event(s) => recovery::after_status(s),
            Failure::NoVersion => Recovery::Relist,
            Failure::Idle | Failure::ShortWatch | Failure::StreamingListCut => Recovery::Resume,
        }
    }

    fn needs_operator(&self) -> bool {
        matches!(self, Failure::Request(e) if recovery::needs_operator(e))
    }
}

/// How a watch ended.
enum End {
    Cancelled,
    /// The server closed it (its timeout): resume at once.
    Clean,
    Failed(Failure),
}

/// How a list ended.
enum Listed<K> {
    Cancelled,
    /// Complete at `version`; a streaming list's stream goes on as the watch.
    Done {
        version: String,
        stream: Option<Events<K>>,
    },
    Failed(Failure),
}

/// One resource's watch, writing into its store.
pub(super) struct Driver<'a, K, S: Store, Src> {
    resource: &'static str,
    source: &'a Src,
    shared: &'a Shared<S>,
    strip: fn(K) -> S::Item,
    reflector: Reflector<'a, S>,
    /// Try streaming lists; cleared for good when the server refuses one.
    streaming: bool,
    backoff: Backoff,
    outage: Outage,
    changes: Vec<Change<S::Item>>,
}

impl<'a, K, S, Src> Driver<'a, K, S, Src>
where
    K: Resource + Clone + Send + 'static,
    S: Store,
    Src: Source<K>,
{
    pub(super) fn new(
        resource: &'static str,
        source: &'a Src,
        shared: &'a Shared<S>,
        strip: fn(K) -> S::Item,
        streaming: bool,
        backoff: Backoff,
    ) -> Self {
        Self {
            resource,
            source,
            shared,
            strip,
            reflector: Reflector::new(shared),
            streaming,
            backoff,
            outage: Outage::default(),
            changes: Vec::new(),
        }
    }

    /// Lists and watches until `cancel`.
    pub(super) async fn run(mut self, cancel: &CancellationToken) {
        // `None`: the store must be (re-)listed before watching.
        let mut position: Option<String> = None;
        loop {
            let (version, stream) = match position.take() {
                Some(version) => (version, None),
                None => match self.list(cancel).await {
                    Listed::Cancelled => return,
                    Listed::Done { version, stream } => (version, stream),
                    Listed::Failed(failure) => {
                        let delay = self.backoff.next_delay();
                        self.failed(&failure, "list failed", delay);
                        if !wait(delay, cancel).await {
                            return;
                        }
                        continue;
                    }
                },
            };
            let (end, version) = self.watch(version, stream, cancel).await;
            match end {
                End::Cancelled => return,
                End::Clean => {
                    debug!(resource = self.resource, %version, "watch ended; resuming");
                    position = Some(version);
                }
                End::Failed(failure) => {
                    let recovery = failure.recovery();
                    let delay = self.backoff.next_delay();
                    if recovery == Recovery::Relist {
                        self.shared.mark_out_of_sync();
                        info!(resource = self.resource, %version, reason = %failure, "the watch's history is gone; listing again");
                    } else {
                        self.failed(&failure, "watch failed", delay);
                    }
                    if !wait(delay, cancel).await {
                        return;
                    }
                    position = (recovery == Recovery::Resume).then_some(version);
                }
            }
        }
    }

    /// A retriable failure: out of sync, logged once per outage.
    fn failed(&mut self, failure: &Failure, what: &str, retry_in: Duration) {
        self.shared.mark_out_of_sync();
        if failure.needs_operator() && !self.outage.is_down() {
            error!(resource = self.resource, error = %failure, "the API server refuses svcplane's list or watch; check its RBAC rules and credentials");
        }
        self.outage.failed(self.resource, what, failure, retry_in);
    }

    fn dispatch(&mut self) {
        for change in self.changes.drain(..) {
            self.shared.dispatch(&change);
        }
    }

    /// A (re-)list: streaming when the server serves it, else paginated.
    async fn list(&mut self, cancel: &CancellationToken) -> Listed<K> {
        self.shared.mark_out_of_sync();
        self.reflector.start_relist();
        if self.streaming {
            let opened = tokio::select! {
                () = cancel.cancelled() => return Listed::Cancelled,
                r = self.source.watch("", true) => r,
            };
            match opened {
                Ok(stream) => return self.streaming_list(stream, cancel).await,
                Err(e) if recovery::streaming_refused(&e) => {
                    info!(resource = self.resource, error = %e, "the API server does not serve streaming lists; using paginated lists");
                    self.streaming = false;
                }
                Err(e) => return Listed::Failed(e.into()),
            }
        }
        let mut token = None;
        loop {
            let page = tokio::select! {
                () = cancel.cancelled() => return Listed::Cancelled,
                r = self.source.list(token.take()) => r,
            };
            let page = match page {
                Ok(page) => page,
                Err(e) => return Listed::Failed(e.into()),
            };
            let version = page.metadata.resource_version.filter(|v| !v.is_empty());
            for obj in page.items {
                self.reflector
                    .listed(Arc::new((self.strip)(obj)), &mut self.changes);
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(next) => token = Some(next),
                None => {
                    let Some(version) = version else {
                        return Listed::Failed(Failure::NoVersion);
                    };
                    self.finish_list();
                    return Listed::Done {
                        version,
                        stream: None,
                    };
                }
            }
        }
    }

    /// The initial events of a streaming list, up to the bookmark that ends them.
    async fn streaming_list(
        &mut self,
        mut stream: Events<K>,
        cancel: &CancellationToken,
    ) -> Listed<K> {
        let idle = self.source.idle_limit();
        loop {
            let next = tokio::select! {
                () = cancel.cancelled() => return Listed::Cancelled,
                n = tokio::time::timeout(idle, stream.next()) => n,
            };
            match next {
                Err(_) => return Listed::Failed(Failure::Idle),
                Ok(None) => return Listed::Failed(Failure::StreamingListCut),
                Ok(Some(Err(e))) => return Listed::Failed(e.into()),
                Ok(Some(Ok(event))) => match event {
                    WatchEvent::Added(obj) | WatchEvent::Modified(obj) => {
                        self.reflector
                            .listed(Arc::new((self.strip)(obj)), &mut self.changes);
                    }
                    // Upstream never sends these among initial events; honoured anyway.
                    WatchEvent::Deleted(obj) => {
                        self.reflector
                            .delete(Arc::new((self.strip)(obj)), &mut self.changes);
                    }
                    WatchEvent::Bookmark(b) => {
                        if b.metadata.annotations.contains_key(INITIAL_EVENTS_END) {
                            self.finish_list();
                            return Listed::Done {
                                version: b.metadata.resource_version,
                                stream: Some(stream),
                            };
                        }
                    }
                    WatchEvent::Error(status) => {
                        return Listed::Failed(Failure::Event(status));
                    }
                },
            }
        }
    }

    /// A list completed: removals for what it did not list, changes out, in sync.
    fn finish_list(&mut self) {
        self.reflector.finish_relist(&mut self.changes);
        if self.shared.is_synced() {
            info!(
                resource = self.resource,
                changes = self.changes.len(),
                "re-listed"
            );
        } else {
            info!(
                resource = self.resource,
                objects = self.shared.read().len(),
                "cache synced"
            );
        }
        self.dispatch();
        self.shared.mark_listed();
        self.outage.recovered(self.resource, "list");
    }

    /// Watches from `version` (or goes on with a streaming list's `stream`) until it
    /// ends; returns how, and the last resourceVersion seen.
    async fn watch(
        &mut self,
        mut version: String,
        stream: Option<Events<K>>,
        cancel: &CancellationToken,
    ) -> (End, String) {
        let mut stream = match stream {
            Some(stream) => stream,
            None => {
                let opened = tokio::select! {
                    () = cancel.cancelled() => return (End::Cancelled, version),
                    r = self.source.watch(&version, false) => r,
                };
                match opened {
                    Ok(stream) => stream,
                    Err(e) => return (End::Failed(e.into()), version),
                }
            }
        };
        let idle = self.source.idle_limit();
        let started = Instant::now();
        let mut delivered = false;
        loop {
            let next = tokio::select! {
                () = cancel.cancelled() => return (End::Cancelled, version),
                n = tokio::time::timeout(idle, stream.next()) => n,
            };
            let event = match next {
                Err(_) => return (End::Failed(Failure::Idle), version),
                Ok(None) if !delivered && started.elapsed() < SHORT_WATCH => {
                    return (End::Failed(Failure::ShortWatch), version);
                }
                Ok(None) => return (End::Clean, version),
                Ok(Some(Err(e))) => return (End::Failed(e.into()), version),
                Ok(Some(Ok(WatchEvent::Error(status)))) => {
                    return (End::Failed(Failure::Event(status)), version);
                }
                Ok(Some(Ok(event))) => event,
            };
            match event {
                WatchEvent::Added(obj) | WatchEvent::Modified(obj) => {
                    version = obj.resource_version().unwrap_or(version);
                    self.reflector
                        .apply(Arc::new((self.strip)(obj)), &mut self.changes);
                }
                WatchEvent::Deleted(obj) => {
                    version = obj.resource_version().unwrap_or(version);
                    self.reflector
                        .delete(Arc::new((self.strip)(obj)), &mut self.changes);
                }
                WatchEvent::Bookmark(b) => version = b.metadata.resource_version,
                WatchEvent::Error(_) => {} // returned above
            }
            self.dispatch();
            if !delivered {
                delivered = true;
                self.caught_up();
            }
        }
    }

    /// A watch delivered its first event or bookmark: the server accepted its
    /// resourceVersion, so every change since is in this stream.
    fn caught_up(&mut self) {
        self.backoff.reset();
        if self.shared.is_synced() && !self.shared.is_in_sync() {
            self.shared.mark_listed();
            info!(
                resource = self.resource,
                "watch resumed without a list; in sync again"
            );
        }
        self.outage.recovered(self.resource, "watch");
    }
}
