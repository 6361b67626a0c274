//! Recording Kubernetes Events (events.k8s.io/v1) without slowing the controllers.
//!
//! Reconcilers describe events ([`crate::core::event::PlannedEvent`]); workers hand them
//! to an [`EventRecorder`], which queues them for one writer task: a sync never waits
//! for an event write, and a full queue drops events (counted in
//! `svcplane_events_dropped_total`) instead of stalling reconciles. Repeats of the same
//! event (same object, controller, type, reason and message) within the series window
//! become a `series` count on the first Event, patched at most once per
//! [`SERIES_PATCH_INTERVAL`], so a Service that fails the same way on every retry costs
//! one create and a patch a minute, not a write per retry. kube-runtime's recorder is
//! not used: it aggregates by reason without the message (distinct topology warnings
//! would merge), writes inline and keeps its cache unbounded.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::metrics::Metrics;
use crate::core::event::{EventType, PlannedEvent};

/// Queued events before new ones are dropped.
pub(crate) const QUEUE_CAPACITY: usize = 4096;
/// Identical events within this window count into one series.
pub(crate) const SERIES_WINDOW: Duration = Duration::from_secs(600);
/// The series count of a repeated event is written at most this often.
pub(crate) const SERIES_PATCH_INTERVAL: Duration = Duration::from_secs(60);
/// Distinct events remembered for series (oldest forgotten first).
pub(crate) const SERIES_MEMORY: usize = 4096;
/// events.k8s.io/v1 limits `note` to 1 kB.
const NOTE_LIMIT: usize = 1024;

/// One event to record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EventRecord {
    /// The object the event is about.
    pub regarding: ObjectReference,
    /// `reportingController`, e.g. `endpoint-slice-controller`.
    pub controller: &'static str,
    /// events.k8s.io `action`.
    pub action: &'static str,
    pub event_type: EventType,
    pub reason: &'static str,
    pub note: String,
}

impl EventRecord {
    pub(crate) fn from_planned(
        regarding: ObjectReference,
        controller: &'static str,
        action: &'static str,
        planned: &PlannedEvent,
    ) -> Self {
        Self {
            regarding,
            controller,
            action,
            event_type: planned.event_type,
            reason: planned.reason,
            note: planned.message.clone(),
        }
    }
}

/// What makes two events "the same" for a series.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
    controller: &'static str,
    action: &'static str,
    warning: bool,
    reason: &'static str,
    note: String,
}

impl SeriesKey {
    fn of(e: &EventRecord) -> Self {
        Self {
            kind: e.regarding.kind.clone(),
            namespace: e.regarding.namespace.clone(),
            name: e.regarding.name.clone(),
            uid: e.regarding.uid.clone(),
            controller: e.controller,
            action: e.action,
            warning: e.event_type == EventType::Warning,
            reason: e.reason,
            note: e.note.clone(),
        }
    }
}

/// Hands events to the writer task.
#[derive(Clone)]
pub(crate) struct EventRecorder {
    tx: mpsc::Sender<EventRecord>,
    metrics: Metrics,
}

impl fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventRecorder").finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// A recorder and its writer task, which stops when `cancel` fires (after
    /// writing what is already queued).
    pub(crate) fn start(
        client: Client,
        instance: String,
        metrics: Metrics,
        cancel: CancellationToken,
    ) -> (Self, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let writer = Writer {
            client,
            instance,
            series: HashMap::new(),
            seq: AtomicU64::new(0),
        };
        let task = tokio::spawn(writer.run(rx, cancel));
        (Self { tx, metrics }, task)
    }

    pub(crate) fn record(&self, event: EventRecord) {
        if self.tx.try_send(event).is_err() {
            self.metrics.event_dropped();
        }
    }
}

/// What is remembered of an event already written.
#[derive(Debug)]
struct Series {
    namespace: String,
    name: String,
    /// Occurrences so far (1 = only the create).
    count: i32,
    /// Occurrences already written (the create, or the last series patch).
    written: i32,
    last_seen: Instant,
    last_written: Instant,
}

struct Writer {
    client: Client,
    instance: String,
    series: HashMap<SeriesKey, Series>,
    seq: AtomicU64,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::Receiver<EventRecord>, cancel: CancellationToken) {
        // Repeats held back by the patch interval are written on this tick, so a
        // series' last count is never lost when the repeats stop.
        let mut flush = tokio::time::interval_at(
            Instant::now() + SERIES_PATCH_INTERVAL,
            SERIES_PATCH_INTERVAL,
        );
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let next = tokio::select! {
                () = cancel.cancelled() => None,
                e = rx.recv() => e,
                _ = flush.tick() => {
                    self.flush_series().await;
                    continue;
                }
            };
            let Some(event) = next else {
                break;
            };
            self.write(event).await;
        }
        // Flush what workers queued before shutdown.
        rx.close();
        while let Ok(event) = rx.try_recv() {
            self.write(event).await;
        }
        self.flush_series().await;
    }

    async fn flush_series(&mut self) {
        let now = Instant::now();
        let due: Vec<(String, String, i32)> = self
            .series
            .values_mut()
            .filter(|s| s.count > s.written)
            .map(|s| {
                s.written = s.count;
                s.last_written = now;
                (s.namespace.clone(), s.name.clone(), s.count)
            })
            .collect();
        for (ns, name, count) in due {
            self.patch_series(&ns, &name, count).await;
        }
    }

    async fn write(&mut self, mut event: EventRecord) {
        if event.note.len() > NOTE_LIMIT {
            let mut cut = NOTE_LIMIT;
            while !event.note.is_char_boundary(cut) {
                cut -= 1;
            }
            event.note.truncate(cut);
        }
        let now = Instant::now();
        if let Some(s) = self.series.get_mut(&SeriesKey::of(&event))
            && now.duration_since(s.last_seen) < SERIES_WINDOW
        {
            s.count += 1;
            s.last_seen = now;
            if now.duration_since(s.last_written) >= SERIES_PATCH_INTERVAL {
                let (ns, name, count) = (s.namespace.clone(), s.name.clone(), s.count);
                s.written = count;
                s.last_written = now;
                self.patch_series(&ns, &name, count).await;
            }
            return;
        }
        self.create(event, now).await;
    }

    async fn create(&mut self, event: EventRecord, now: Instant) {
        let namespace = event
            .regarding
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_owned());
        let stamp = Timestamp::now();
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            "{}.{:x}{seq:x}",
            event.regarding.name.as_deref().unwrap_or(event.controller),
            stamp.as_nanosecond()
        );
        let obj = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            action: Some(event.action.to_owned()),
            reason: Some(event.reason.to_owned()),
            note: Some(event.note.clone()),
            event_time: Some(MicroTime(stamp)),
            regarding: Some(event.regarding.clone()),
            reporting_controller: Some(event.controller.to_owned()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(
                match event.event_type {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_owned(),
            ),
            ..Event::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => debug!(reason = event.reason, namespace, name, "event recorded"),
            Err(e) => {
                warn!(reason = event.reason, namespace, error = %e, "recording an event failed");
                return;
            }
        }
        if self.series.len() >= SERIES_MEMORY {
            self.forget_oldest();
        }
        self.series.insert(
            SeriesKey::of(&event),
            Series {
                namespace,
                name,
                count: 1,
                written: 1,
                last_seen: now,
                last_written: now,
            },
        );
    }

    async fn patch_series(&self, namespace: &str, name: &str, count: i32) {
        let patch = serde_json::json!({
            "series": EventSeries {
                count,
                last_observed_time: MicroTime(Timestamp::now()),
            }
        });
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        if let Err(e) = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            debug!(namespace, name, error = %e, "updating an event series failed");
        }
    }

    fn forget_oldest(&mut self) {
        let oldest = self
            .series
            .iter()
            .min_by_key(|(_, s)| s.last_seen)
            .map(|(k, _)| k.clone());
        if let Some(k) = oldest {
            self.series.remove(&k);
        }
    }
}

/// A reference to a namespaced object for an event's `regarding`.
pub(crate) fn object_reference(
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version.to_owned()),
        kind: Some(kind.to_owned()),
        namespace: Some(namespace.to_owned()),
        name: Some(name.to_owned()),
        uid: uid.map(str::to_owned),
        ..ObjectReference::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    use http::{Request, Response};
    use http_body_util::BodyExt;
    use kube::client::Body;

    /// (method, body) of every request.
    type Log = Arc<Mutex<Vec<(String, serde_json::Value)>>>;

    /// A client that records (method, body) and echoes the body back as the object.
    fn recording_client() -> (kube::Client, Log) {
        let seen: Log = Arc::default();
        let log = seen.clone();
        let svc = tower::service_fn(move |req: Request<Body>| {
            let log = log.clone();
            async move {
                let method = req.method().to_string();
                let bytes = req.into_body().collect().await.unwrap().to_bytes();
                let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
                log.lock().unwrap().push((method, v.clone()));
                v["apiVersion"] = "events.k8s.io/v1".into();
                v["kind"] = "Event".into();
                v["metadata"]["name"] = v["metadata"]["name"].as_str().unwrap_or("e").into();
                Ok::<_, std::convert::Infallible>(
                    Response::builder()
                        .status(201)
                        .header("content-type", "application/json")
                        .body(Body::from(serde_json::to_vec(&v).unwrap()))
                        .unwrap(),
                )
            }
        });
        (kube::Client::new(svc, "default"), seen)
    }

    fn event(note: &str) -> EventRecord {
        EventRecord {
            regarding: object_reference("v1", "Service", "ns", "web", Some("u1")),
            controller: "endpoint-slice-controller",
            action: "Reconcile",
            event_type: EventType::Warning,
            reason: "FailedToUpdateEndpointSlices",
            note: note.into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn repeats_become_one_series_and_the_last_count_is_written() {
        let (client, seen) = recording_client();
        let stop = CancellationToken::new();
        let (rec, task) =
            EventRecorder::start(client, "replica-a".into(), Metrics::new(), stop.clone());
        for _ in 0..3 {
            rec.record(event("boom"));
        }
        rec.record(event("another message"));
        tokio::time::sleep(Duration::from_secs(1)).await;
        {
            let s = seen.lock().unwrap();
            let methods: Vec<&str> = s.iter().map(|(m, _)| m.as_str()).collect();
            assert_eq!(methods, ["POST", "POST"], "one create per distinct message");
            assert_eq!(s[0].1["reportingController"], "endpoint-slice-controller");
            assert_eq!(s[0].1["reportingInstance"], "replica-a");
            assert_eq!(s[0].1["regarding"]["name"], "web");
        }
        // The held-back repeats are flushed on the next tick.
        tokio::time::sleep(SERIES_PATCH_INTERVAL + Duration::from_secs(1)).await;
        {
            let s = seen.lock().unwrap();
            assert_eq!(s.len(), 3, "{s:?}");
            assert_eq!(s[2].0, "PATCH");
            assert_eq!(s[2].1["series"]["count"], 3);
        }
        stop.cancel();
        task.await.unwrap();
    }
}
