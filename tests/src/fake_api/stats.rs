//! Request accounting: how many calls of each verb hit each resource, how many bytes went
//! each way, and the ordered log of writes. Scenario tests assert on these ("a steady
//! state makes no writes", "one Service change costs one slice update").

use std::collections::BTreeMap;
use std::fmt;

/// The API verb of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// GET of one object.
    Get,
    /// GET of a collection.
    List,
    /// GET of a collection with `watch=true`.
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH.
    Patch,
    /// DELETE of one object.
    Delete,
}

impl Verb {
    /// Lower-case name, as in RBAC (`get`, `list`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }

    /// Whether the verb changes state.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete
        )
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Counters for one `(verb, resource)` pair.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counter {
    /// Requests received (including failed and fault-injected ones).
    pub requests: u64,
    /// Requests answered with a status of 400 or more.
    pub errors: u64,
    /// Requests with `dryRun=All`.
    pub dry_run: u64,
    /// Request body bytes.
    pub request_bytes: u64,
    /// Response body bytes (for watches: everything streamed so far).
    pub response_bytes: u64,
}

impl Counter {
    fn add(&mut self, other: &Counter) {
        self.requests += other.requests;
        self.errors += other.errors;
        self.dry_run += other.dry_run;
        self.request_bytes += other.request_bytes;
        self.response_bytes += other.response_bytes;
    }
}

/// A snapshot of the counters, keyed by verb and resource (`pods`, or `services/status` for
/// a subresource).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// All counters.
    pub by_call: BTreeMap<(Verb, String), Counter>,
}

impl Stats {
    /// The counters for one verb on one resource (zero if never called).
    pub fn get(&self, verb: Verb, resource: &str) -> Counter {
        self.by_call
            .get(&(verb, resource.to_string()))
            .copied()
            .unwrap_or_default()
    }

    /// Requests of one verb on one resource.
    pub fn requests(&self, verb: Verb, resource: &str) -> u64 {
        self.get(verb, resource).requests
    }

    /// Sum over everything.
    pub fn total(&self) -> Counter {
        let mut t = Counter::default();
        self.by_call.values().for_each(|c| t.add(c));
        t
    }

    /// Sum of the write verbs (create, update, patch, delete).
    pub fn writes(&self) -> u64 {
        self.by_call
            .iter()
            .filter(|((v, _), _)| v.is_write())
            .map(|(_, c)| c.requests)
            .sum()
    }

    pub(crate) fn entry(&mut self, verb: Verb, resource: &str) -> &mut Counter {
        self.by_call
            .entry((verb, resource.to_string()))
            .or_default()
    }
}

/// One write request, in the order the fake decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRecord {
    /// create, update, patch or delete.
    pub verb: Verb,
    /// API group (`""` for core).
    pub group: String,
    /// Plural resource name.
    pub resource: String,
    /// `Some("status")` for status writes.
    pub subresource: Option<String>,
    /// Namespace, for namespaced resources.
    pub namespace: Option<String>,
    /// Object name (the generated one for a successful `generateName` create).
    pub name: String,
    /// HTTP status of the answer.
    pub code: u16,
    /// Whether it was a `dryRun=All` request.
    pub dry_run: bool,
}
