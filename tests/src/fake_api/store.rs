//! The state behind the fake: objects per resource, the global resourceVersion, and for each
//! resource a bounded event history plus the channels of its open watches.
//!
//! Every write goes through [`Store::put`] or [`Store::remove`], which bump the one global
//! resourceVersion, stamp it into the object, append the change to the resource's history
//! and hand it to every open watch, all under the caller's lock. So a watch that subscribes
//! under the same lock sees each change exactly once, in resourceVersion order.
//!
//! Watch channels are unbounded: a slow watcher costs memory, never blocks a writer, and is
//! never dropped behind the test's back. A dropped watch (client went away) is pruned on the
//! next write to its resource.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;

use super::clock::{Clock, format_time};
use super::meta;
use super::registry::{Gvr, Registry};
use super::rng::Rng;
use super::stats::WriteRecord;
use super::status::ApiError;

/// `(namespace or "", name)`: the map order is the list order upstream uses.
pub(crate) type ObjKey = (String, String);

pub(crate) fn key(namespace: Option<&str>, name: &str) -> ObjKey {
    (namespace.unwrap_or_default().to_string(), name.to_string())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeType {
    Added,
    Modified,
    Deleted,
}

/// One committed write, as watches see it.
#[derive(Debug)]
pub(crate) struct Change {
    pub(crate) rv: u64,
    pub(crate) kind: ChangeType,
    /// The new state (for a delete: the last state, carrying the delete's resourceVersion).
    pub(crate) object: Arc<Value>,
    /// The state before a modification, so selector watches can turn it into ADDED/DELETED.
    pub(crate) prev: Option<Arc<Value>>,
}

#[derive(Debug, Default)]
struct Table {
    objects: BTreeMap<ObjKey, Arc<Value>>,
    history: VecDeque<Arc<Change>>,
    /// The resourceVersion of the newest change dropped from `history` (0: none dropped).
    /// A watch from an older resourceVersion can no longer be served.
    evicted_up_to: u64,
    watchers: Vec<mpsc::UnboundedSender<Arc<Change>>>,
}

/// What a new watch starts with.
#[derive(Debug)]
pub(crate) enum Backlog {
    /// No resourceVersion given: every current object, as synthetic ADDED events.
    Snapshot(Vec<Arc<Value>>),
    /// From a resourceVersion: the kept changes after it.
    Changes(Vec<Arc<Change>>),
}

#[derive(Debug)]
pub(crate) struct Subscription {
    pub(crate) backlog: Backlog,
    /// The global resourceVersion at subscription time.
    pub(crate) rv: u64,
    pub(crate) rx: mpsc::UnboundedReceiver<Arc<Change>>,
}

/// Settings fixed when the fake is built.
#[derive(Debug, Clone)]
pub(crate) struct StoreConfig {
    pub(crate) history_limit: usize,
    pub(crate) seed: u64,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) record_writes: bool,
}

#[derive(Debug)]
pub(crate) struct Store {
    pub(crate) registry: Registry,
    tables: HashMap<Gvr, Table>,
    rv: u64,
    uids: u64,
    pub(crate) rng: Rng,
    history_limit: usize,
    clock: Arc<dyn Clock>,
    record_writes: bool,
    writes: Vec<WriteRecord>,
}

impl Store {
    pub(crate) fn new(config: StoreConfig) -> Self {
        Self {
            registry: Registry::builtin(),
            tables: HashMap::new(),
            rv: 0,
            uids: 0,
            rng: Rng::new(config.seed),
            history_limit: config.history_limit,
            clock: config.clock,
            record_writes: config.record_writes,
            writes: Vec::new(),
        }
    }

    /// The current global resourceVersion.
    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    pub(crate) fn objects(&self, gvr: &Gvr) -> Option<&BTreeMap<ObjKey, Arc<Value>>> {
        self.tables.get(gvr).map(|t| &t.objects)
    }

    pub(crate) fn get(&self, gvr: &Gvr, key: &ObjKey) -> Option<Arc<Value>> {
        self.tables.get(gvr)?.objects.get(key).cloned()
    }

    /// A deterministic, counter-based uid (`dry_run`: the next one, without using it up).
    pub(crate) fn uid(&mut self, dry_run: bool) -> String {
        let n = self.uids + 1;
        if !dry_run {
            self.uids = n;
        }
        format!("00000000-0000-4000-8000-{n:012x}")
    }

    /// The current time as `metav1.Time`.
    pub(crate) fn now(&self) -> String {
        format_time(self.clock.now())
    }

    /// Stores `obj` under `key` with a new resourceVersion; ADDED or MODIFIED.
    pub(crate) fn put(&mut self, gvr: &Gvr, key: ObjKey, mut obj: Value) -> Arc<Value> {
        self.rv += 1;
        let rv = self.rv;
        meta::set(&mut obj, "resourceVersion", Value::from(rv.to_string()));
        let obj = Arc::new(obj);
        let table = self.tables.entry(gvr.clone()).or_default();
        let prev = table.objects.insert(key, obj.clone());
        let kind = if prev.is_some() {
            ChangeType::Modified
        } else {
            ChangeType::Added
        };
        self.emit(
            gvr,
            Change {
                rv,
                kind,
                object: obj.clone(),
                prev,
            },
        );
        obj
    }

    /// Removes the object under `key` with a new resourceVersion; DELETED. `last` replaces
    /// the stored state as the final one (used when an update removes the last finalizer).
    pub(crate) fn remove(
        &mut self,
        gvr: &Gvr,
        key: &ObjKey,
        last: Option<Value>,
    ) -> Option<Arc<Value>> {
        let old = self.tables.get_mut(gvr)?.objects.remove(key)?;
        self.rv += 1;
        let rv = self.rv;
        let mut obj = last.unwrap_or_else(|| (*old).clone());
        meta::set(&mut obj, "resourceVersion", Value::from(rv.to_string()));
        let obj = Arc::new(obj);
        self.emit(
            gvr,
            Change {
                rv,
                kind: ChangeType::Deleted,
                object: obj.clone(),
                prev: None,
            },
        );
        Some(obj)
    }

    fn emit(&mut self, gvr: &Gvr, change: Change) {
        let limit = self.history_limit;
        let table = self.tables.entry(gvr.clone()).or_default();
        let change = Arc::new(change);
        if limit == 0 {
            table.evicted_up_to = change.rv;
        } else {
            while table.history.len() >= limit {
                match table.history.pop_front() {
                    Some(old) => table.evicted_up_to = old.rv,
                    None => break,
                }
            }
            table.history.push_back(change.clone());
        }
        table.watchers.retain(|tx| tx.send(change.clone()).is_ok());
    }

    /// Opens a watch on `gvr`: from `since` (a resourceVersion) or, with `None`, from a
    /// snapshot of the current objects. 410 Expired if `since` is older than the history.
    pub(crate) fn subscribe(
        &mut self,
        gvr: &Gvr,
        since: Option<u64>,
    ) -> Result<Subscription, ApiError> {
        let rv = self.rv;
        let table = self.tables.entry(gvr.clone()).or_default();
        let backlog = match since {
            None => Backlog::Snapshot(table.objects.values().cloned().collect()),
            Some(from) if from < table.evicted_up_to => {
                return Err(ApiError::expired(from, table.evicted_up_to));
            }
            Some(from) => {
                let start = table.history.partition_point(|c| c.rv <= from);
                Backlog::Changes(table.history.range(start..).cloned().collect())
            }
        };
        let (tx, rx) = mpsc::unbounded_channel();
        table.watchers.push(tx);
        Ok(Subscription { backlog, rv, rx })
    }

    /// Forgets all history: every watch from an old resourceVersion now gets 410.
    pub(crate) fn compact(&mut self) {
        let rv = self.rv;
        for table in self.tables.values_mut() {
            table.history.clear();
            table.evicted_up_to = rv;
        }
    }

    /// Ends every open watch stream (clients reconnect from their last resourceVersion).
    pub(crate) fn close_watches(&mut self) {
        for table in self.tables.values_mut() {
            table.watchers.clear();
        }
    }

    pub(crate) fn record(&mut self, write: WriteRecord) {
        if self.record_writes {
            self.writes.push(write);
        }
    }

    pub(crate) fn writes(&self) -> &[WriteRecord] {
        &self.writes
    }

    pub(crate) fn clear_writes(&mut self) {
        self.writes.clear();
    }
}
