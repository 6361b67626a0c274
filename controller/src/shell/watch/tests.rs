//! The recovery rules (ES-1.8) against a scripted API server: each test lists the
//! answers the server gives, in order, and checks the calls the watch made and what
//! the store and its consumers saw.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use kube::api::{ObjectList, WatchEvent};
use kube::core::watch::{Bookmark, BookmarkMeta};
use kube::core::{Status, TypeMeta};
use svcplane_webhook::retry::Backoff;
use tokio_util::sync::CancellationToken;

use super::Change;
use super::driver::Driver;
use super::source::{Events, Source};
use crate::shell::cache::{Cache, Consumer, Keyed, Store, strip};

/// One answer of the scripted server.
enum Answer {
    Page {
        items: Vec<Service>,
        version: &'static str,
        next: Option<&'static str>,
    },
    ListFails(kube::Error),
    /// A watch that sends these, then ends.
    Watch(Vec<Result<WatchEvent<Service>, kube::Error>>),
    /// A watch that sends these, then stays open.
    WatchOpen(Vec<Result<WatchEvent<Service>, kube::Error>>),
    WatchFails(kube::Error),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    List(Option<String>),
    Watch { version: String, initial: bool },
}

#[derive(Default)]
struct Script {
    answers: Mutex<VecDeque<Answer>>,
    calls: Mutex<Vec<Call>>,
}

impl Script {
    fn new(answers: impl IntoIterator<Item = Answer>) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers.into_iter().collect()),
            calls: Mutex::default(),
        })
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn lists(&self) -> usize {
        self.calls()
            .iter()
            .filter(|c| matches!(c, Call::List(_)))
            .count()
    }

    fn left(&self) -> usize {
        self.answers.lock().unwrap().len()
    }
}

struct Scripted(Arc<Script>);

impl Source<Service> for Scripted {
    async fn list(
        &self,
        continue_token: Option<String>,
    ) -> Result<ObjectList<Service>, kube::Error> {
        self.0
            .calls
            .lock()
            .unwrap()
            .push(Call::List(continue_token));
        let answer = self.0.answers.lock().unwrap().pop_front();
        match answer {
            Some(Answer::Page {
                items,
                version,
                next,
            }) => Ok(ObjectList {
                types: TypeMeta::default(),
                metadata: ListMeta {
                    resource_version: Some(version.to_owned()),
                    continue_: next.map(str::to_owned),
                    ..ListMeta::default()
                },
                items,
            }),
            Some(Answer::ListFails(e)) => Err(e),
            // Out of script: the server stops answering.
            None => futures::future::pending().await,
            Some(_) => panic!("the watch listed where the script expected a watch"),
        }
    }

    async fn watch(&self, version: &str, initial: bool) -> Result<Events<Service>, kube::Error> {
        self.0.calls.lock().unwrap().push(Call::Watch {
            version: version.to_owned(),
            initial,
        });
        let answer = self.0.answers.lock().unwrap().pop_front();
        match answer {
            Some(Answer::Watch(events)) => Ok(futures::stream::iter(events).boxed()),
            Some(Answer::WatchOpen(events)) => Ok(futures::stream::iter(events)
                .chain(futures::stream::pending())
                .boxed()),
            Some(Answer::WatchFails(e)) => Err(e),
            None => Ok(futures::stream::pending().boxed()),
            Some(_) => panic!("the watch watched where the script expected a list"),
        }
    }

    fn idle_limit(&self) -> Duration {
        Duration::from_secs(3600)
    }
}

/// Records what the store's consumers are told.
#[derive(Default)]
struct Seen {
    changes: Mutex<Vec<String>>,
    sync: Mutex<Vec<bool>>,
}

impl Consumer<Service> for Seen {
    fn changed(&self, change: &Change<Service>) {
        let line = match change {
            Change::Added(s) => format!("added {}@{}", s.name(), rv(s)),
            Change::Updated { new, .. } => format!("updated {}@{}", new.name(), rv(new)),
            Change::Deleted(s) => format!("deleted {}", s.name()),
        };
        self.changes.lock().unwrap().push(line);
    }

    fn sync_changed(&self, in_sync: bool) {
        self.sync.lock().unwrap().push(in_sync);
    }
}

fn rv(s: &Service) -> &str {
    s.resource_version().unwrap_or("-")
}

impl Seen {
    fn changes(&self) -> Vec<String> {
        std::mem::take(&mut *self.changes.lock().unwrap())
    }
    fn sync(&self) -> Vec<bool> {
        self.sync.lock().unwrap().clone()
    }
}

fn svc(name: &str, version: &str) -> Service {
    Service {
        metadata: ObjectMeta {
            namespace: Some("default".into()),
            name: Some(name.into()),
            resource_version: Some(version.into()),
            ..ObjectMeta::default()
        },
        ..Service::default()
    }
}

fn page(items: Vec<Service>, version: &'static str) -> Answer {
    Answer::Page {
        items,
        version,
        next: None,
    }
}

fn added(name: &str, version: &str) -> Result<WatchEvent<Service>, kube::Error> {
    Ok(WatchEvent::Added(svc(name, version)))
}

fn bookmark(version: &str, initial_end: bool) -> Result<WatchEvent<Service>, kube::Error> {
    let mut annotations = BTreeMap::new();
    if initial_end {
        annotations.insert("k8s.io/initial-events-end".to_owned(), "true".to_owned());
    }
    Ok(WatchEvent::Bookmark(Bookmark {
        types: TypeMeta::default(),
        metadata: BookmarkMeta {
            resource_version: version.to_owned(),
            annotations,
        },
    }))
}

fn status(code: u16, reason: &str) -> Status {
    let mut s = Status::failure("from the script", reason);
    s.code = code;
    s
}

fn connection_refused() -> kube::Error {
    kube::Error::Service(Box::new(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        "client error (Connect)",
    )))
}

fn watch_from(version: &str) -> Call {
    Call::Watch {
        version: version.to_owned(),
        initial: false,
    }
}

/// Runs a watch of Services over `script` for `secs` seconds of (paused) time.
async fn run(script: &Arc<Script>, streaming: bool, secs: u64) -> (Arc<Cache>, Arc<Seen>) {
    let cache = Arc::new(Cache::default());
    let seen = Arc::new(Seen::default());
    cache.services.attach(seen.clone());
    let cancel = CancellationToken::new();
    let task = {
        let (cache, source, cancel) = (cache.clone(), Scripted(script.clone()), cancel.clone());
        tokio::spawn(async move {
            Driver::new(
                "services",
                &source,
                &cache.services,
                strip::service,
                streaming,
                Backoff::new(1),
            )
            .run(&cancel)
            .await;
        })
    };
    tokio::time::sleep(Duration::from_secs(secs)).await;
    cancel.cancel();
    task.await.unwrap();
    assert_eq!(script.left(), 0, "the script was not played to the end");
    (cache, seen)
}

fn names(cache: &Cache) -> Vec<String> {
    let mut v: Vec<String> = cache
        .services
        .read()
        .all()
        .iter()
        .map(|s| format!("{}@{}", s.name(), rv(s)))
        .collect();
    v.sort();
    v
}

#[tokio::test(start_paused = true)]
async fn rule_1_8_resume_after_a_connection_error_without_a_list() {
    let script = Script::new([
        page(vec![svc("a", "1"), svc("b", "2")], "10"),
        Answer::Watch(vec![added("c", "11"), Err(connection_refused())]),
        // The API server is down: the resume attempt itself fails, and is retried.
        Answer::WatchFails(connection_refused()),
        Answer::WatchFails(kube::Error::Api(status(503, "ServiceUnavailable").into())),
        Answer::WatchOpen(vec![Ok(WatchEvent::Modified(svc("a", "12")))]),
    ]);
    let (cache, _) = run(&script, false, 120).await;
    assert_eq!(script.lists(), 1, "{:?}", script.calls());
    assert_eq!(
        script.calls(),
        [
            Call::List(None),
            watch_from("10"),
            watch_from("11"),
            watch_from("11"),
            watch_from("11"),
        ]
    );
    assert_eq!(names(&cache), ["a@12", "b@2", "c@11"]);
    assert!(cache.services.is_synced() && cache.services.is_in_sync());
}

#[tokio::test(start_paused = true)]
async fn rule_1_8_relist_after_410() {
    let script = Script::new([
        page(vec![svc("a", "1")], "10"),
        Answer::Watch(vec![Ok(WatchEvent::Error(status(410, "Expired").into()))]),
        page(vec![svc("a", "1")], "40"),
        // The resume attempt itself answered 410: list again too.
        Answer::WatchFails(kube::Error::Api(status(410, "Gone").into())),
        page(vec![svc("a", "1")], "50"),
        Answer::WatchOpen(vec![]),
    ]);
    let (cache, _) = run(&script, false, 120).await;
    assert_eq!(
        script.calls(),
        [
            Call::List(None),
            watch_from("10"),
            Call::List(None),
            watch_from("40"),
            Call::List(None),
            watch_from("50"),
        ]
    );
    assert!(cache.services.is_in_sync());
}

#[tokio::test(start_paused = true)]
async fn rule_1_8_relist_replaces_state_including_deletes() {
    let script = Script::new([
        page(vec![svc("a", "1"), svc("b", "2"), svc("c", "3")], "10"),
        Answer::Watch(vec![Ok(WatchEvent::Error(status(410, "Expired").into()))]),
        // Paginated: b changed, c is gone, d is new, a is unchanged.
        Answer::Page {
            items: vec![svc("a", "1"), svc("b", "5")],
            version: "60",
            next: Some("page-2"),
        },
        page(vec![svc("d", "6")], "60"),
        Answer::WatchOpen(vec![]),
    ]);
    let (cache, seen) = run(&script, false, 120).await;
    assert_eq!(script.calls()[3], Call::List(Some("page-2".into())));
    let mut changes = seen.changes();
    changes.drain(..3); // the first list's three additions
    assert_eq!(changes, ["updated b@5", "added d@6", "deleted c"]);
    assert_eq!(names(&cache), ["a@1", "b@5", "d@6"]);
    // Out of sync from the 410 until the re-list completed; listed throughout.
    assert_eq!(seen.sync(), [true, false, true]);
}

#[tokio::test(start_paused = true)]
async fn rule_1_8_bookmark_advances_the_resume_version() {
    let script = Script::new([
        page(vec![svc("a", "1")], "10"),
        // A quiet resource: only bookmarks, then the server's timeout.
        Answer::Watch(vec![bookmark("50", false)]),
        Answer::Watch(vec![bookmark("70", false), Err(connection_refused())]),
        Answer::WatchOpen(vec![]),
    ]);
    run(&script, false, 120).await;
    assert_eq!(
        script.calls()[1..],
        [watch_from("10"), watch_from("50"), watch_from("70")]
    );
}

#[tokio::test(start_paused = true)]
async fn rule_1_8_a_clean_end_resumes_at_once_and_stays_in_sync() {
    let script = Script::new([
        page(vec![], "10"),
        Answer::Watch(vec![added("a", "11")]),
        Answer::WatchOpen(vec![]),
    ]);
    let started = tokio::time::Instant::now();
    let (_, seen) = run(&script, false, 1).await;
    assert_eq!(script.calls()[2], watch_from("11"));
    assert_eq!(seen.sync(), [true], "never out of sync");
    assert!(started.elapsed() <= Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn rule_1_8_in_sync_returns_with_the_first_event_of_the_resumed_watch() {
    let script = Script::new([
        page(vec![svc("a", "1")], "10"),
        Answer::Watch(vec![Err(connection_refused())]),
        Answer::WatchFails(connection_refused()),
        // Open, but nothing yet: the store may still miss changes.
        Answer::WatchOpen(vec![]),
    ]);
    let (cache, seen) = run(&script, false, 120).await;
    assert_eq!(seen.sync(), [true, false]);
    assert!(cache.services.is_synced(), "listed stays raised");
    assert!(!cache.services.is_in_sync());

    let script = Script::new([
        page(vec![svc("a", "1")], "10"),
        Answer::Watch(vec![Err(connection_refused())]),
        Answer::WatchOpen(vec![bookmark("20", false)]),
    ]);
    let (cache, seen) = run(&script, false, 120).await;
    assert_eq!(seen.sync(), [true, false, true]);
    assert!(cache.services.is_in_sync());
}

#[tokio::test(start_paused = true)]
async fn rule_1_8_a_watch_that_ends_at_once_is_retried_with_backoff() {
    let script = Script::new([
        page(vec![], "10"),
        Answer::Watch(vec![]),
        Answer::Watch(vec![]),
        Answer::WatchOpen(vec![]),
    ]);
    let started = tokio::time::Instant::now();
    run(&script, false, 120).await;
    assert_eq!(script.lists(), 1);
    assert!(started.elapsed() >= Duration::from_millis(1500));
}

#[tokio::test(start_paused = true)]
async fn rule_1_8_streaming_list_when_the_server_serves_it() {
    let script = Script::new([Answer::WatchOpen(vec![
        added("a", "1"),
        added("b", "2"),
        bookmark("30", true),
        added("c", "31"),
    ])]);
    let (cache, seen) = run(&script, true, 10).await;
    assert_eq!(
        script.calls(),
        [Call::Watch {
            version: String::new(),
            initial: true
        }]
    );
    assert_eq!(names(&cache), ["a@1", "b@2", "c@31"]);
    assert_eq!(seen.sync(), [true]);
}

#[tokio::test(start_paused = true)]
async fn rule_1_8_paginated_lists_when_streaming_is_refused() {
    let script = Script::new([
        Answer::WatchFails(kube::Error::Api(status(422, "Invalid").into())),
        page(vec![svc("a", "1")], "10"),
        Answer::Watch(vec![Ok(WatchEvent::Error(status(410, "Expired").into()))]),
        // Refused once: the re-list is paginated straight away.
        page(vec![svc("a", "1")], "20"),
        Answer::WatchOpen(vec![]),
    ]);
    run(&script, true, 120).await;
    assert_eq!(
        script.calls(),
        [
            Call::Watch {
                version: String::new(),
                initial: true
            },
            Call::List(None),
            watch_from("10"),
            Call::List(None),
            watch_from("20"),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn rule_1_8_a_failed_list_is_retried_from_the_start() {
    let script = Script::new([
        Answer::Page {
            items: vec![svc("a", "1")],
            version: "10",
            next: Some("p2"),
        },
        Answer::ListFails(connection_refused()),
        page(vec![svc("a", "1")], "12"),
        Answer::WatchOpen(vec![]),
    ]);
    let (cache, _) = run(&script, false, 120).await;
    assert_eq!(
        script.calls(),
        [
            Call::List(None),
            Call::List(Some("p2".into())),
            Call::List(None),
            watch_from("12"),
        ]
    );
    assert!(cache.services.is_synced());
}
