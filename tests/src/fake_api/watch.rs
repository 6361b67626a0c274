//! WATCH: a newline-delimited JSON event stream, fed by the store's per-resource channel.
//!
//! Start: with a resourceVersion, the kept changes after it (410 `Expired` as an ERROR event
//! if it is older than the history); without one (or `0`), synthetic ADDED events for the
//! current objects, followed by a BOOKMARK annotated `k8s.io/initial-events-end` when
//! `sendInitialEvents=true` (streaming lists, `watcher::Config::streaming_lists()`).
//!
//! Then live changes. With a label/field selector, an object that stops matching is sent as
//! DELETED (its previous state with the new resourceVersion) and one that starts matching as
//! ADDED, as upstream's watch cache does. With `allowWatchBookmarks`, a BOOKMARK goes out
//! every bookmark interval and once more when `timeoutSeconds` ends the stream, so clients
//! resume from a fresh resourceVersion. A bookmark's resourceVersion is read under the store
//! lock after draining the channel, so no change at or below it is still undelivered.
//!
//! All timers are tokio timers (paused-clock friendly). The stream ends at the timeout, when
//! [`FakeApi::close_watches`](super::FakeApi::close_watches) is called, or when the client
//! drops the body (which drops the channel receiver; the store prunes the sender).

use std::borrow::Cow;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};

use super::meta;
use super::registry::ResourceInfo;
use super::selector::Filter;
use super::stats::Verb;
use super::store::{Backlog, Change, ChangeType};
use super::{Shared, lock};

/// The longest watch served (one year).
const MAX_WATCH_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// What the client asked for.
#[derive(Debug, Clone)]
pub(crate) struct WatchParams {
    pub(crate) filter: Filter,
    /// `None`: start with the current objects.
    pub(crate) since: Option<u64>,
    pub(crate) bookmarks: bool,
    pub(crate) send_initial_events: bool,
    pub(crate) timeout: Duration,
    pub(crate) meta_only: bool,
}

enum Line {
    Event(&'static str, Arc<Value>),
    Bookmark { rv: u64, initial_end: bool },
    Error(Value),
}

#[derive(Serialize)]
struct EventLine<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    object: &'a Value,
}

struct WatchState {
    shared: Arc<Shared>,
    stat_resource: String,
    params: WatchParams,
    api_version: String,
    kind: String,
    pending: VecDeque<Line>,
    rx: Option<mpsc::UnboundedReceiver<Arc<Change>>>,
    deadline: Pin<Box<Sleep>>,
    next_bookmark: Pin<Box<Sleep>>,
    bookmark_interval: Duration,
    finished: bool,
}

/// Opens the watch now (so no change after this call is missed) and returns its body.
pub(crate) fn open(
    shared: Arc<Shared>,
    info: &ResourceInfo,
    params: WatchParams,
    stat_resource: String,
) -> impl Stream<Item = Bytes> + Send + 'static {
    let subscription = lock(&shared.store).subscribe(&info.gvr, params.since);
    let now = Instant::now();
    let bookmark_interval = shared.bookmark_interval.max(Duration::from_millis(1));
    let (api_version, kind) = if params.meta_only {
        (
            "meta.k8s.io/v1".to_string(),
            "PartialObjectMetadata".to_string(),
        )
    } else {
        (info.gvr.api_version(), info.kind.clone())
    };
    // Clamped so `now + timeout` cannot overflow on absurd `timeoutSeconds` values.
    let timeout = params.timeout.min(MAX_WATCH_TIMEOUT);
    let mut state = WatchState {
        deadline: Box::pin(tokio::time::sleep_until(now + timeout)),
        next_bookmark: Box::pin(tokio::time::sleep_until(now + bookmark_interval)),
        bookmark_interval,
        shared,
        stat_resource,
        api_version,
        kind,
        pending: VecDeque::new(),
        rx: None,
        finished: false,
        params,
    };
    match subscription {
        Err(expired) => {
            state.pending.push_back(Line::Error(expired.to_status()));
            state.finished = true;
        }
        Ok(sub) => {
            match sub.backlog {
                Backlog::Snapshot(objects) => {
                    for obj in objects {
                        if state.params.filter.matches(&obj) {
                            state.pending.push_back(Line::Event("ADDED", obj));
                        }
                    }
                    if state.params.send_initial_events {
                        state.pending.push_back(Line::Bookmark {
                            rv: sub.rv,
                            initial_end: true,
                        });
                    }
                }
                Backlog::Changes(changes) => changes.iter().for_each(|c| state.push_change(c)),
            }
            state.rx = Some(sub.rx);
        }
    }
    futures::stream::unfold(state, |mut s| async move {
        let line = s.next_line().await?;
        Some((line, s))
    })
}

impl WatchState {
    /// The event (if any) this watch sends for a committed change.
    fn push_change(&mut self, c: &Change) {
        let filter = &self.params.filter;
        let now = filter.matches(&c.object);
        let line = match c.kind {
            ChangeType::Added => now.then(|| Line::Event("ADDED", c.object.clone())),
            ChangeType::Deleted => now.then(|| Line::Event("DELETED", c.object.clone())),
            ChangeType::Modified => {
                let before = c.prev.as_ref().is_some_and(|p| filter.matches(p));
                match (before, now, &c.prev) {
                    (true, true, _) => Some(Line::Event("MODIFIED", c.object.clone())),
                    (false, true, _) => Some(Line::Event("ADDED", c.object.clone())),
                    (true, false, Some(prev)) => {
                        let mut gone = (**prev).clone();
                        meta::set(&mut gone, "resourceVersion", Value::from(c.rv.to_string()));
                        Some(Line::Event("DELETED", Arc::new(gone)))
                    }
                    _ => None,
                }
            }
        };
        self.pending.extend(line);
    }

    /// Queues a bookmark at the current resourceVersion, after every change up to it.
    fn push_bookmark(&mut self) {
        let shared = self.shared.clone();
        let store = lock(&shared.store);
        let mut drained = Vec::new();
        if let Some(rx) = self.rx.as_mut() {
            while let Ok(c) = rx.try_recv() {
                drained.push(c);
            }
        }
        let rv = store.rv();
        drop(store);
        drained.iter().for_each(|c| self.push_change(c));
        self.pending.push_back(Line::Bookmark {
            rv,
            initial_end: false,
        });
    }

    async fn next_line(&mut self) -> Option<Bytes> {
        loop {
            if let Some(line) = self.pending.pop_front() {
                return Some(self.encode(line));
            }
            if self.finished {
                return None;
            }
            let bookmarks = self.params.bookmarks;
            let Some(rx) = self.rx.as_mut() else {
                self.finished = true;
                continue;
            };
            tokio::select! {
                biased;
                change = rx.recv() => match change {
                    Some(c) => self.push_change(&c),
                    None => self.finished = true,
                },
                () = &mut self.deadline => {
                    if bookmarks {
                        self.push_bookmark();
                    }
                    self.finished = true;
                }
                () = &mut self.next_bookmark, if bookmarks => {
                    self.push_bookmark();
                    let next = Instant::now() + self.bookmark_interval;
                    self.next_bookmark.as_mut().reset(next);
                }
            }
        }
    }

    fn encode(&self, line: Line) -> Bytes {
        let encoded = match line {
            Line::Event(kind, obj) => {
                let object = if self.params.meta_only {
                    Cow::Owned(meta::partial(&obj))
                } else {
                    Cow::Borrowed(obj.as_ref())
                };
                serde_json::to_vec(&EventLine {
                    kind,
                    object: &object,
                })
            }
            Line::Bookmark { rv, initial_end } => {
                let mut metadata = json!({ "resourceVersion": rv.to_string() });
                if initial_end {
                    metadata["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
                }
                serde_json::to_vec(&json!({
                    "type": "BOOKMARK",
                    "object": { "kind": self.kind, "apiVersion": self.api_version, "metadata": metadata },
                }))
            }
            Line::Error(status) => {
                serde_json::to_vec(&json!({ "type": "ERROR", "object": status }))
            }
        };
        // Serialising JSON values cannot fail.
        let mut bytes = encoded.unwrap_or_default();
        bytes.push(b'\n');
        lock(&self.shared.stats)
            .entry(Verb::Watch, &self.stat_resource)
            .response_bytes += bytes.len() as u64;
        Bytes::from(bytes)
    }
}
