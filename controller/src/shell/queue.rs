//! The controllers' work queue: de-duplicating, delayed, with per-key exponential
//! backoff and a global token bucket (ES-1.7).
//!
//! kube-runtime's `Controller` schedules differently (it does not merge a delayed add
//! into a key already waiting the way client-go's queue does, and it has no per-key
//! retry count to give up on), so svcplane keeps its own. The decisions live in
//! [`QueueCore`], a plain data structure driven by an explicit `now`, so every rule is
//! unit-tested without a runtime; [`WorkQueue`] wraps it for async workers on the tokio
//! clock (which tests pause).
//!
//! Rules, as client-go's workqueue has them:
//! - a key is never handed to two workers at once; adding a key that is being
//!   processed marks it dirty and it is handed out again after [`QueueCore::done`];
//! - adding a key that is already queued does nothing (the adds merge);
//! - a delayed add fires at its time; a second delayed add of a key already waiting
//!   only moves its time earlier;
//! - a failed key waits `max(base × 2^failures, token-bucket delay)` (capped), and
//!   [`QueueCore::forget`] resets its failure count after a success.
//!
//! One rule is svcplane's own, write coalescing ([`QueueCore::add_coalesced`]), and it
//! acts on pressure rather than on a clock. A key whose last two syncs came less than
//! the burst gap apart is in a *burst*; a coalescible add of it is held after its last
//! sync for the *hold*, the longer of two measures of pressure, at most the add's
//! `window`:
//! - that sync's *turn* (from when the key was ready to be handed out to when its
//!   sync was done) times the queue's [`HoldPerSync`] factor. A turn is mostly the API
//!   server's answer to the sync's writes and any wait for a worker or a token, so
//!   against an idle API server the hold is a few milliseconds and a change goes out
//!   at once, while a loaded one makes it longer and more changes share a write;
//! - the share of its burst the controller's client has spent: from nothing when the
//!   client is idle to the whole window once it has spent [`SPENT_FOR_FULL_HOLD`] of
//!   it, so a client writing about as fast as its QPS allows spends fewer writes per
//!   change.
//!
//! An add while the key is being synced (its write in flight) waits the hold after
//! that sync ends. A key whose last burst carried a *batch* (a sync of three adds or
//! more) and ended less than two burst gaps ago holds its next add for the hold from
//! its own arrival, gathering the rest of a rollout's wave. An add of a key not in a
//! burst is handed out at once. Each add names its window (withdrawn endpoints a short
//! one) and the shortest waiting one wins; a plain [`QueueCore::add`] never waits and
//! overtakes a coalesced add already waiting. A client without a token at all is
//! [`WorkQueue`]'s: its workers take no key until the client could send a request.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::kube_client::ratelimit::ClientBudget;
use crate::token_bucket::TokenBucket;

/// How a queue delays failed keys.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RateLimit {
    /// Delay after the first failure; doubled per further failure.
    pub base: Duration,
    /// Upper bound of the per-key delay.
    pub max: Duration,
    /// Global token bucket shared by all failing keys: refill rate...
    pub qps: f64,
    /// ...and size.
    pub burst: u32,
}

impl RateLimit {
    /// The EndpointSlice controller's limiter: 1 s → 1000 s, 10 qps, burst 100.
    pub(crate) const ENDPOINT_SLICE: RateLimit = RateLimit {
        base: Duration::from_secs(1),
        max: Duration::from_secs(1000),
        qps: 10.0,
        burst: 100,
    };
    /// The mirroring controller's limiter: 1 s → 100 s, 10 qps, burst 100.
    pub(crate) const MIRRORING: RateLimit = RateLimit {
        base: Duration::from_secs(1),
        max: Duration::from_secs(100),
        qps: 10.0,
        burst: 100,
    };
    /// The Endpoints controller's limiter (client-go's default): 5 ms → 1000 s.
    pub(crate) const ENDPOINTS: RateLimit = RateLimit {
        base: Duration::from_millis(5),
        max: Duration::from_secs(1000),
        qps: 10.0,
        burst: 100,
    };

    /// The per-key delay after `failures` earlier failures.
    pub(crate) fn backoff(&self, failures: u32) -> Duration {
        // 2^31 × base overflows long before; the cap applies well before that.
        let factor = 2u32.saturating_pow(failures.min(31));
        self.base.saturating_mul(factor).min(self.max)
    }
}

/// Adds one sync must carry to count as a batch (see the module docs).
const BATCH: u32 = 3;

/// How a key's last sync went, for write coalescing.
#[derive(Debug, Clone, Copy)]
struct LastSync {
    /// When it was done.
    at: Instant,
    /// How long its turn took (ready to be handed out, to done).
    took: Duration,
    /// It came within the burst gap of the sync before.
    burst: bool,
    /// It carried at least [`BATCH`] coalescible adds, or came in a burst whose
    /// syncs did.
    batch: bool,
}

/// How long a key in a burst is held after a sync, as a multiple of that sync's turn
/// (see the module docs). A turn is mostly the API server's answer to its writes and
/// any wait for a worker or a token, so the hold measures pressure: a few
/// milliseconds against an idle API server, up to the window against a loaded one.
/// Each controller picks its factor so that its additions wait no longer than the
/// same upstream controller's own sync would hold them (see its constant).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HoldPerSync(pub u32);

/// The share of its burst a client has spent when its queue holds a key in a burst
/// for the whole window: a client this far into its burst is writing about as fast
/// as its QPS refills it, and each write saved is one another key can have.
const SPENT_FOR_FULL_HOLD: f64 = 0.5;

/// The hold after a sync whose turn took `took`, while `spent` of the client's burst
/// is used: `per_sync` times the turn, or the window scaled by how far the client is
/// towards [`SPENT_FOR_FULL_HOLD`] if that is longer; never more than `window`.
fn hold_after(took: Duration, per_sync: HoldPerSync, spent: f64, window: Duration) -> Duration {
    let by_budget = window.mul_f64((spent / SPENT_FOR_FULL_HOLD).clamp(0.0, 1.0));
    took.saturating_mul(per_sync.0).max(by_budget).min(window)
}

/// The queue's state and rules, driven by an explicit clock.
#[derive(Debug)]
pub(crate) struct QueueCore<K> {
    queue: VecDeque<K>,
    /// Keys waiting to be processed: queued, or processing and to be re-queued.
    dirty: HashSet<K>,
    processing: HashSet<K>,
    /// Delayed adds: the earliest time per key, and a heap of (time, sequence)
    /// whose stale entries (superseded by an earlier time) are skipped on pop.
    waiting: HashMap<K, (Instant, u64)>,
    heap: BinaryHeap<Reverse<(Instant, u64, K)>>,
    seq: u64,
    failures: HashMap<K, u32>,
    limit: RateLimit,
    bucket: TokenBucket,
    /// Keys newly queued so far (merged adds not counted, delayed ones when they
    /// fire): client-go's `workqueue_adds_total`.
    adds: u64,
    /// When each dirty key was queued, where known (`workqueue_queue_duration_seconds`).
    added_at: HashMap<K, Instant>,
    /// When each key being processed was handed out (the in-progress gauges).
    started_at: HashMap<K, Instant>,
    /// When each key being processed became ready to be handed out (its add, or
    /// when its delay ran out; its hand-out when unknown): the start of its *turn*.
    turn_from: HashMap<K, Instant>,
    /// Two syncs of a key closer than this make a burst (zero: coalescing off, and
    /// `add_coalesced` is a plain add).
    burst_gap: Duration,
    /// When each recently synced key was last done, and how (only a sync in a burst
    /// holds the next adds back).
    last_done: HashMap<K, LastSync>,
    /// Coalescible adds of each key since it was last handed out, then, while it is
    /// processed, those its sync carries: the batch size.
    adds_since_pop: HashMap<K, u32>,
    batch_of: HashMap<K, u32>,
    /// Keys given a coalescible add while being processed, with the shortest window
    /// asked for (re-queued up to that long after they are done).
    deferred: HashMap<K, Duration>,
    /// How long a key in a burst is held after a sync, per unit of its turn.
    hold_per_sync: HoldPerSync,
    /// How much of the client's burst was spent when last looked at (0 to 1).
    budget_spent: f64,
}

impl<K: Clone + Eq + Hash + Ord> QueueCore<K> {
    pub(crate) fn new(limit: RateLimit) -> Self {
        Self {
            queue: VecDeque::new(),
            dirty: HashSet::new(),
            processing: HashSet::new(),
            waiting: HashMap::new(),
            heap: BinaryHeap::new(),
            seq: 0,
            failures: HashMap::new(),
            limit,
            bucket: TokenBucket::new(limit.qps, limit.burst),
            adds: 0,
            added_at: HashMap::new(),
            started_at: HashMap::new(),
            turn_from: HashMap::new(),
            burst_gap: Duration::ZERO,
            last_done: HashMap::new(),
            adds_since_pop: HashMap::new(),
            batch_of: HashMap::new(),
            deferred: HashMap::new(),
            hold_per_sync: HoldPerSync(1),
            budget_spent: 0.0,
        }
    }

    /// Turns write coalescing on: syncs of a key closer than `burst_gap` make a
    /// burst (zero turns coalescing off), whose adds are held `hold_per_sync` times
    /// the last sync's turn (or longer while the client's burst is spent).
    pub(crate) fn set_coalescing(&mut self, burst_gap: Duration, hold_per_sync: HoldPerSync) {
        self.burst_gap = burst_gap;
        self.hold_per_sync = hold_per_sync;
    }

    /// Notes how much of the client's burst is spent (0: idle or no limiter), the
    /// second measure of pressure the hold follows.
    pub(crate) fn set_budget_spent(&mut self, spent: f64) {
        self.budget_spent = spent;
    }

    /// How long an add is held after `last`, at most `window`.
    fn hold(&self, last: &LastSync, window: Duration) -> Duration {
        hold_after(last.took, self.hold_per_sync, self.budget_spent, window)
    }

    /// Queues `key` now, unless it is in a burst and its hold (the longer of its last
    /// sync's turn times the factor and the client's spent share of `window`, at most
    /// `window`) has not run out since that sync:
    /// then when it does, merged with later adds; while it is being processed, the
    /// hold after it is done (see the module docs). A shorter window overtakes a
    /// longer one already waiting. Returns whether it was queued for now.
    pub(crate) fn add_coalesced(&mut self, key: K, window: Duration, now: Instant) -> bool {
        if !self.burst_gap.is_zero() {
            *self.adds_since_pop.entry(key.clone()).or_default() += 1;
        }
        if self.burst_gap.is_zero() || window.is_zero() || self.dirty.contains(&key) {
            return self.add_at(key, Some(now));
        }
        if self.processing.contains(&key) {
            let w = self.deferred.entry(key).or_insert(window);
            *w = (*w).min(window);
            return false;
        }
        match self.last_done.get(&key) {
            Some(last) if last.burst && last.at + self.hold(last, window) > now => {
                let wait = last.at + self.hold(last, window) - now;
                self.add_after(key, wait, now);
                false
            }
            Some(last) if last.batch && last.at + self.burst_gap * 2 > now => {
                let hold = self.hold(last, window);
                if hold.is_zero() {
                    return self.add_at(key, Some(now));
                }
                self.add_after(key, hold, now);
                false
            }
            _ => self.add_at(key, Some(now)),
        }
    }

    /// Queues `key` now. Returns whether it was newly queued (false when it merged
    /// into a pending entry).
    pub(crate) fn add(&mut self, key: K) -> bool {
        self.add_at(key, None)
    }

    /// [`QueueCore::add`], noting `at` as the time it was queued (for the
    /// time-in-queue metric) when it is newly queued.
    pub(crate) fn add_at(&mut self, key: K, at: Option<Instant>) -> bool {
        if self.dirty.contains(&key) {
            return false;
        }
        if let Some(at) = at {
            self.added_at.insert(key.clone(), at);
        }
        self.dirty.insert(key.clone());
        self.adds += 1;
        if !self.processing.contains(&key) {
            self.queue.push_back(key);
        }
        true
    }

    /// Queues `key` ahead of every key already queued (moving it to the front if it
    /// is queued already): a Service whose clients have nothing to reach until it is
    /// synced ([`crate::core::migrated`]). A key being processed is re-queued after it
    /// is done, as any add. Returns whether it was newly queued.
    pub(crate) fn add_first(&mut self, key: K, at: Option<Instant>) -> bool {
        if self.dirty.contains(&key) {
            if let Some(i) = self.queue.iter().position(|k| *k == key)
                && let Some(k) = self.queue.remove(i)
            {
                self.queue.push_front(k);
            }
            return false;
        }
        let added = self.add_at(key.clone(), at);
        if added && self.queue.back() == Some(&key) {
            self.queue.pop_back();
            self.queue.push_front(key);
        }
        added
    }

    /// Keys newly queued since the queue was made.
    pub(crate) fn adds(&self) -> u64 {
        self.adds
    }

    /// Queues `key` at `now + delay`; a zero delay is [`QueueCore::add`].
    pub(crate) fn add_after(&mut self, key: K, delay: Duration, now: Instant) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let at = now + delay;
        self.seq += 1;
        match self.waiting.entry(key.clone()) {
            Entry::Occupied(mut e) => {
                if at >= e.get().0 {
                    return;
                }
                e.insert((at, self.seq));
            }
            Entry::Vacant(e) => {
                e.insert((at, self.seq));
            }
        }
        self.heap.push(Reverse((at, self.seq, key)));
    }

    /// Queues a failed key after its backoff; returns the delay used.
    pub(crate) fn add_rate_limited(&mut self, key: K, now: Instant) -> Duration {
        let failures = self.failures.entry(key.clone()).or_insert(0);
        let per_key = self.limit.backoff(*failures);
        *failures = failures.saturating_add(1);
        let delay = per_key.max(self.bucket.reserve(now));
        self.add_after(key, delay, now);
        delay
    }

    /// How many times `key` failed since it last succeeded.
    pub(crate) fn num_requeues(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }

    /// Resets `key`'s backoff (after a successful sync, or when giving up on it).
    pub(crate) fn forget(&mut self, key: &K) {
        self.failures.remove(key);
    }

    /// Moves delayed keys whose time has come into the queue.
    fn promote(&mut self, now: Instant) {
        while let Some(Reverse((at, seq, _))) = self.heap.peek() {
            if *at > now {
                break;
            }
            let (at, seq) = (*at, *seq);
            let Some(Reverse((_, _, key))) = self.heap.pop() else {
                break;
            };
            if self.waiting.get(&key) == Some(&(at, seq)) {
                self.waiting.remove(&key);
                // Queued when it fell due, as client-go's delaying queue adds it then.
                self.add_at(key, Some(at));
            }
        }
    }

    /// Hands out the next key due at `now`, marking it as processing.
    #[cfg(test)]
    pub(crate) fn pop(&mut self, now: Instant) -> Option<K> {
        self.pop_timed(now).map(|(key, _)| key)
    }

    /// [`QueueCore::pop`], with how long the key waited in the queue when known.
    pub(crate) fn pop_timed(&mut self, now: Instant) -> Option<(K, Option<Duration>)> {
        self.promote(now);
        let key = self.queue.pop_front()?;
        self.dirty.remove(&key);
        self.processing.insert(key.clone());
        self.started_at.insert(key.clone(), now);
        if let Some(adds) = self.adds_since_pop.remove(&key) {
            self.batch_of.insert(key.clone(), adds);
        }
        let ready = self.added_at.remove(&key);
        self.turn_from.insert(key.clone(), ready.unwrap_or(now));
        let waited = ready.map(|at| now.saturating_duration_since(at));
        Some((key, waited))
    }

    /// Work in progress at `now`: the seconds all workers have spent on their current
    /// keys together, and the longest any one has (client-go's unfinished-work and
    /// longest-running-processor gauges).
    pub(crate) fn in_progress(&self, now: Instant) -> (f64, f64) {
        self.started_at
            .values()
            .map(|t| now.saturating_duration_since(*t).as_secs_f64())
            .fold((0.0, 0.0), |(sum, longest), age| {
                (sum + age, f64::max(longest, age))
            })
    }

    /// Marks `key` finished at `now`; a key added meanwhile is queued again (at once,
    /// or a coalescing window later when only coalescible adds came).
    pub(crate) fn done(&mut self, key: &K, now: Instant) {
        self.started_at.remove(key);
        let took = self
            .turn_from
            .remove(key)
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        self.processing.remove(key);
        let deferred = self.deferred.remove(key);
        if self.dirty.contains(key) {
            self.queue.push_back(key.clone());
        } else if let Some(window) = deferred {
            let hold = hold_after(took, self.hold_per_sync, self.budget_spent, window);
            self.add_after(key.clone(), hold, now);
        }
        let adds = self.batch_of.remove(key).unwrap_or(0);
        if !self.burst_gap.is_zero() {
            let before = self
                .last_done
                .get(key)
                .filter(|before| before.at + self.burst_gap > now);
            // A burst that carried a batch stays one to its end, whatever its last
            // syncs carried (the stragglers of a wave, a resync of the key).
            let last = LastSync {
                at: now,
                took,
                burst: before.is_some(),
                batch: adds >= BATCH || before.is_some_and(|b| b.batch),
            };
            self.last_done.insert(key.clone(), last);
            // Forget keys synced long ago, in amortised O(1): only when the map has
            // doubled since the last sweep. No window is anywhere near a minute.
            if self.last_done.len() >= 1024 && self.last_done.len().is_power_of_two() {
                let horizon = Duration::from_secs(60);
                self.last_done.retain(|_, last| last.at + horizon > now);
            }
        }
    }

    /// When the earliest delayed key is due, if any (drops superseded heap entries
    /// on the way, so this stays O(log n)).
    pub(crate) fn next_due(&mut self) -> Option<Instant> {
        while let Some(Reverse((at, seq, key))) = self.heap.peek() {
            if self.waiting.get(key) == Some(&(*at, *seq)) {
                return Some(*at);
            }
            self.heap.pop();
        }
        None
    }

    /// Keys ready now.
    pub(crate) fn ready_len(&self) -> usize {
        self.queue.len()
    }

    /// Nothing queued, waiting or being processed.
    pub(crate) fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.waiting.is_empty() && self.processing.is_empty()
    }
}

/// Where a queue reports client-go's workqueue metrics (`workqueue_work_duration_seconds`
/// and `workqueue_retries_total` are the workers' to report).
#[derive(Debug, Clone)]
pub(crate) struct QueueGauges {
    pub depth: prometheus_client::metrics::gauge::Gauge,
    pub adds: prometheus_client::metrics::counter::Counter,
    pub queue_duration: prometheus_client::metrics::histogram::Histogram,
    pub unfinished: prometheus_client::metrics::gauge::Gauge<f64, std::sync::atomic::AtomicU64>,
    pub longest: prometheus_client::metrics::gauge::Gauge<f64, std::sync::atomic::AtomicU64>,
}

/// A [`QueueCore`] shared by async producers and workers.
#[derive(Debug)]
pub(crate) struct WorkQueue<K> {
    core: Mutex<QueueCore<K>>,
    notify: Notify,
    shutdown: CancellationToken,
    gauges: Option<QueueGauges>,
    reported_adds: std::sync::atomic::AtomicU64,
    /// The request budget of the client the workers write with: while it is empty,
    /// keys stay queued (see the module docs).
    budget: Option<ClientBudget>,
}

impl<K: Clone + Eq + Hash + Ord> WorkQueue<K> {
    pub(crate) fn new(limit: RateLimit, shutdown: CancellationToken) -> Self {
        Self {
            core: Mutex::new(QueueCore::new(limit)),
            notify: Notify::new(),
            shutdown,
            gauges: None,
            reported_adds: std::sync::atomic::AtomicU64::new(0),
            budget: None,
        }
    }

    /// Hands keys out only while `budget` has a token (write coalescing).
    #[must_use]
    pub(crate) fn with_budget(mut self, budget: Option<ClientBudget>) -> Self {
        self.budget = budget;
        self
    }

    /// Reports depth (keys ready) and adds, as client-go does.
    #[must_use]
    pub(crate) fn with_gauges(mut self, gauges: QueueGauges) -> Self {
        self.gauges = Some(gauges);
        self
    }

    /// Brings the metrics up to date with `core` (called under its lock).
    fn report(&self, core: &QueueCore<K>) {
        if let Some(g) = &self.gauges {
            g.depth
                .set(i64::try_from(core.ready_len()).unwrap_or(i64::MAX));
            let total = core.adds();
            let before = self
                .reported_adds
                .swap(total, std::sync::atomic::Ordering::Relaxed);
            g.adds.inc_by(total.saturating_sub(before));
            let (unfinished, longest) = core.in_progress(Instant::now());
            g.unfinished.set(unfinished);
            g.longest.set(longest);
        }
    }

    /// Brings the metrics up to date (before a scrape: workers may have been busy on
    /// one key for a long time without any add or done).
    pub(crate) fn refresh_metrics(&self) {
        let core = self.lock();
        self.report(&core);
    }

    /// The queue state. Never held across an await: every operation is a few map
    /// updates, so a std mutex; a poisoned one is still consistent (each operation
    /// completes its updates before anything can panic).
    pub(crate) fn lock(&self) -> MutexGuard<'_, QueueCore<K>> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn add(&self, key: K) {
        let added = {
            let mut core = self.lock();
            let added = core.add_at(key, Some(Instant::now()));
            self.report(&core);
            added
        };
        if added {
            self.notify.notify_one();
        }
    }

    /// [`QueueCore::add_first`].
    pub(crate) fn add_first(&self, key: K) {
        let added = {
            let mut core = self.lock();
            let added = core.add_first(key, Some(Instant::now()));
            self.report(&core);
            added
        };
        if added {
            self.notify.notify_one();
        }
    }

    /// [`QueueCore::set_coalescing`].
    pub(crate) fn set_coalescing(&self, burst_gap: Duration, hold_per_sync: HoldPerSync) {
        self.lock().set_coalescing(burst_gap, hold_per_sync);
    }

    /// [`QueueCore::add_coalesced`] on the tokio clock.
    pub(crate) fn add_coalesced(&self, key: K, window: Duration) {
        let spent = self.budget.as_ref().map_or(0.0, ClientBudget::spent);
        {
            let mut core = self.lock();
            core.set_budget_spent(spent);
            core.add_coalesced(key, window, Instant::now());
            self.report(&core);
        }
        // Whether queued now or delayed: a new earliest deadline must re-arm a
        // sleeping worker's timer too.
        self.notify.notify_one();
    }

    pub(crate) fn add_after(&self, key: K, delay: Duration) {
        self.lock().add_after(key, delay, Instant::now());
        // A new earliest deadline must wake a sleeping worker to re-arm its timer.
        self.notify.notify_one();
    }

    pub(crate) fn add_rate_limited(&self, key: K) -> Duration {
        let delay = self.lock().add_rate_limited(key, Instant::now());
        self.notify.notify_one();
        delay
    }

    pub(crate) fn forget(&self, key: &K) {
        self.lock().forget(key);
    }

    pub(crate) fn num_requeues(&self, key: &K) -> u32 {
        self.lock().num_requeues(key)
    }

    pub(crate) fn done(&self, key: &K) {
        let spent = self.budget.as_ref().map_or(0.0, ClientBudget::spent);
        let requeued = {
            let mut core = self.lock();
            core.set_budget_spent(spent);
            core.done(key, Instant::now());
            self.report(&core);
            core.ready_len() > 0
        };
        if requeued {
            self.notify.notify_one();
        }
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.lock().is_idle()
    }

    /// The next key to process; `None` once the queue is shut down.
    pub(crate) async fn next(&self) -> Option<K> {
        loop {
            if self.shutdown.is_cancelled() {
                return None;
            }
            // A sync now would write with a token the client does not have yet: its
            // writes would wait in the limiter and miss every change arriving
            // meanwhile. Waiting here instead lets those changes merge into the key.
            if let Some(wait) = self.budget.as_ref().map(ClientBudget::until_token)
                && !wait.is_zero()
            {
                tokio::select! {
                    () = self.shutdown.cancelled() => return None,
                    () = tokio::time::sleep(wait) => continue,
                }
            }
            // Register interest before looking, so an add between the look and the
            // wait is not missed.
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (key, due, more) = {
                let mut core = self.lock();
                let popped = core.pop_timed(Instant::now());
                self.report(&core);
                let key = popped.map(|(key, waited)| {
                    if let (Some(g), Some(waited)) = (&self.gauges, waited) {
                        g.queue_duration.observe(waited.as_secs_f64());
                    }
                    key
                });
                (key, core.next_due(), core.ready_len() > 0)
            };
            if let Some(key) = key {
                if more {
                    // Pass the baton: another worker may take the next ready key.
                    self.notify.notify_one();
                }
                return Some(key);
            }
            let sleep = async {
                match due {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = self.shutdown.cancelled() => return None,
                () = &mut notified => {}
                () = sleep => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_queue_holds_a_burst_for_the_window_once_its_client_spent_half_its_burst() {
        let budget = crate::kube_client::ratelimit::RateLimitLayer::new(1.0, 4).budget();
        let q = WorkQueue::new(RateLimit::ENDPOINT_SLICE, CancellationToken::new())
            .with_budget(Some(budget.clone()));
        q.set_coalescing(Duration::from_secs(1), HoldPerSync(3));
        let window = Duration::from_millis(250);
        for _ in 0..2 {
            q.add("svc");
            let key = q.next().await;
            q.done(&"svc");
            assert_eq!(key, Some("svc"));
        }
        // A burst of instant syncs with an idle client: nothing is held.
        q.add_coalesced("svc", window);
        assert_eq!(q.lock().ready_len(), 1);
        assert_eq!(q.next().await, Some("svc"));
        q.done(&"svc");
        // Two of four tokens gone: held for the whole window.
        budget.spend(2);
        q.add_coalesced("svc", window);
        assert_eq!(q.lock().ready_len(), 0);
        assert_eq!(q.lock().next_due(), Some(Instant::now() + window));
    }

    #[test]
    fn a_key_added_first_overtakes_every_queued_key_and_is_still_merged() {
        let mut q = QueueCore::new(NO_BUCKET);
        let now = t0();
        for k in ["a", "b", "c"] {
            q.add(k);
        }
        assert!(q.add_first("m", Some(now)));
        // Already queued: moved to the front, not queued twice.
        assert!(!q.add_first("c", Some(now)));
        assert!(!q.add("m"));
        let order: Vec<_> = std::iter::from_fn(|| q.pop(now)).collect();
        assert_eq!(order, ["c", "m", "a", "b"]);
    }

    #[test]
    fn a_key_added_first_while_processed_is_handed_out_again_after_done() {
        let mut q = QueueCore::new(NO_BUCKET);
        let now = t0();
        q.add("m");
        assert_eq!(q.pop(now), Some("m"));
        q.add("a");
        // Never to a second worker while the first has it.
        assert!(q.add_first("m", Some(now)));
        assert_eq!(q.pop(now), Some("a"));
        assert_eq!(q.pop(now), None);
        q.done(&"m", now);
        assert_eq!(q.pop(now), Some("m"));
    }

    #[test]
    fn time_in_queue_counts_from_the_add_or_from_when_a_delayed_key_fell_due() {
        let mut q = QueueCore::new(RateLimit::ENDPOINT_SLICE);
        let t0 = Instant::now();
        q.add_at("a", Some(t0));
        // A merged add keeps the first time.
        q.add_at("a", Some(t0 + Duration::from_secs(1)));
        assert_eq!(
            q.pop_timed(t0 + Duration::from_secs(3)),
            Some(("a", Some(Duration::from_secs(3))))
        );
        q.add_after("b", Duration::from_secs(5), t0);
        assert_eq!(
            q.pop_timed(t0 + Duration::from_secs(7)),
            Some(("b", Some(Duration::from_secs(2))))
        );
    }

    #[test]
    fn work_in_progress_sums_and_maxes_the_busy_workers_then_clears() {
        let mut q = QueueCore::new(RateLimit::ENDPOINT_SLICE);
        let t0 = Instant::now();
        q.add("a");
        q.add("b");
        q.pop(t0);
        q.pop(t0 + Duration::from_secs(2));
        assert_eq!(q.in_progress(t0 + Duration::from_secs(5)), (8.0, 5.0));
        q.done(&"a", t0);
        assert_eq!(q.in_progress(t0 + Duration::from_secs(5)), (3.0, 3.0));
        q.done(&"b", t0);
        assert_eq!(q.in_progress(t0 + Duration::from_secs(5)), (0.0, 0.0));
    }

    const NO_BUCKET: RateLimit = RateLimit {
        base: Duration::from_secs(1),
        max: Duration::from_secs(1000),
        qps: 0.0,
        burst: 0,
    };

    fn t0() -> Instant {
        Instant::now()
    }

    #[test]
    fn rule_1_7_adds_of_a_queued_key_merge() {
        let mut q = QueueCore::new(NO_BUCKET);
        let now = t0();
        assert!(q.add("a"));
        assert!(!q.add("a"));
        assert!(q.add("b"));
        assert_eq!(q.pop(now), Some("a"));
        assert_eq!(q.pop(now), Some("b"));
        assert_eq!(q.pop(now), None);
    }

    #[test]
    fn rule_1_7_a_key_is_never_processed_twice_at_once() {
        let mut q = QueueCore::new(NO_BUCKET);
        let now = t0();
        q.add("a");
        assert_eq!(q.pop(now), Some("a"));
        // Added while processing: held back until done.
        q.add("a");
        assert_eq!(q.pop(now), None);
        q.done(&"a", now);
        assert_eq!(q.pop(now), Some("a"));
        q.done(&"a", now);
        assert!(q.is_idle());
        // Two keys newly queued ("a" twice, after it was handed out); merges uncounted.
        assert_eq!(q.adds(), 2);
    }

    #[test]
    fn rule_1_7_delayed_add_fires_at_its_time_and_keeps_the_earliest() {
        let mut q = QueueCore::new(NO_BUCKET);
        let now = t0();
        q.add_after("a", Duration::from_secs(5), now);
        q.add_after("a", Duration::from_secs(2), now);
        q.add_after("a", Duration::from_secs(9), now);
        assert_eq!(q.next_due(), Some(now + Duration::from_secs(2)));
        assert_eq!(q.pop(now + Duration::from_secs(1)), None);
        assert_eq!(q.pop(now + Duration::from_secs(2)), Some("a"));
        q.done(&"a", now);
        // The superseded 5 s and 9 s entries do not fire again.
        assert_eq!(q.pop(now + Duration::from_secs(10)), None);
        assert!(q.is_idle());
    }

    #[test]
    fn rule_1_7_zero_delay_is_an_immediate_add() {
        let mut q = QueueCore::new(NO_BUCKET);
        let now = t0();
        q.add_after("a", Duration::ZERO, now);
        assert_eq!(q.pop(now), Some("a"));
    }

    #[test]
    fn rule_1_7_per_key_backoff_doubles_up_to_the_cap_and_forget_resets() {
        let mut q = QueueCore::new(RateLimit {
            max: Duration::from_secs(5),
            ..NO_BUCKET
        });
        let now = t0();
        let delays: Vec<u64> = (0..5)
            .map(|_| q.add_rate_limited("a", now).as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 5, 5]);
        assert_eq!(q.num_requeues(&"a"), 5);
        q.forget(&"a");
        assert_eq!(q.num_requeues(&"a"), 0);
        assert_eq!(q.add_rate_limited("a", now), Duration::from_secs(1));
    }

    #[test]
    fn rule_1_7_token_bucket_delays_bursts_of_failures() {
        let mut q = QueueCore::new(RateLimit {
            base: Duration::from_millis(5),
            max: Duration::from_secs(1000),
            qps: 10.0,
            burst: 2,
        });
        let now = t0();
        assert_eq!(q.add_rate_limited("a", now), Duration::from_millis(5));
        assert_eq!(q.add_rate_limited("b", now), Duration::from_millis(5));
        // The bucket is empty: the third failure waits for a token (100 ms at 10 qps).
        assert_eq!(q.add_rate_limited("c", now), Duration::from_millis(100));
        assert_eq!(q.add_rate_limited("d", now), Duration::from_millis(200));
        // Refilled after a while.
        let later = now + Duration::from_secs(10);
        assert_eq!(q.add_rate_limited("e", later), Duration::from_millis(5));
    }

    #[test]
    fn upstream_limiters_match_the_spec_table() {
        assert_eq!(RateLimit::ENDPOINT_SLICE.backoff(0), Duration::from_secs(1));
        assert_eq!(
            RateLimit::ENDPOINT_SLICE.backoff(20),
            Duration::from_secs(1000)
        );
        assert_eq!(RateLimit::MIRRORING.backoff(20), Duration::from_secs(100));
        assert_eq!(RateLimit::ENDPOINTS.backoff(0), Duration::from_millis(5));
    }

    #[tokio::test(start_paused = true)]
    async fn workers_wake_for_adds_and_delays_and_stop_on_shutdown() {
        let stop = CancellationToken::new();
        let q = std::sync::Arc::new(WorkQueue::new(NO_BUCKET, stop.clone()));
        let start = Instant::now();
        q.add_after("late", Duration::from_secs(3));
        let worker = {
            let q = q.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                while let Some(k) = q.next().await {
                    seen.push((k, Instant::now().duration_since(start).as_secs()));
                    q.done(&k);
                }
                seen
            })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        q.add("now");
        tokio::time::sleep(Duration::from_secs(5)).await;
        stop.cancel();
        let seen = worker.await.unwrap();
        assert_eq!(seen, [("now", 1), ("late", 3)]);
    }
}

#[cfg(test)]
mod coalescing_tests {
    use super::*;

    /// The cap (`--write-coalescing-window`); the tests' burst gap is one window.
    const WINDOW: Duration = Duration::from_millis(100);
    /// The tests' factor: a key in a burst is held three times its last sync.
    const HOLD: HoldPerSync = HoldPerSync(3);
    /// A sync against a loaded API server: held back three times that, 60 ms.
    const LOADED: Duration = Duration::from_millis(20);

    fn queue() -> (QueueCore<&'static str>, Instant) {
        let mut q = QueueCore::new(RateLimit::ENDPOINT_SLICE);
        q.set_coalescing(WINDOW, HOLD);
        (q, Instant::now() + ms(1000))
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// One sync of `key` that took `took`, done at `t`.
    fn sync(q: &mut QueueCore<&'static str>, key: &'static str, t: Instant, took: Duration) {
        q.add(key);
        assert_eq!(q.pop(t - took), Some(key));
        q.done(&key, t);
    }

    /// Two syncs of `key` taking `took` each, the second done at `t`: a burst.
    fn burst(q: &mut QueueCore<&'static str>, key: &'static str, t: Instant, took: Duration) {
        sync(q, key, t - took - ms(1), took);
        sync(q, key, t, took);
    }

    #[test]
    fn a_key_not_synced_recently_is_handed_out_at_once() {
        let (mut q, t0) = queue();
        assert!(q.add_coalesced("svc", WINDOW, t0));
        assert_eq!(q.pop(t0), Some("svc"));
    }

    #[test]
    fn one_isolated_sync_does_not_hold_back_the_next_change() {
        let (mut q, t0) = queue();
        sync(&mut q, "svc", t0 + ms(20), LOADED);
        assert!(
            q.add_coalesced("svc", WINDOW, t0 + ms(25)),
            "not a burst yet"
        );
        q.pop(t0 + ms(25));
        q.done(&"svc", t0 + ms(45));
        assert!(
            !q.add_coalesced("svc", WINDOW, t0 + ms(50)),
            "now a burst: waits"
        );
    }

    #[test]
    fn against_an_idle_api_server_a_burst_holds_nothing_back() {
        let (mut q, t0) = queue();
        burst(&mut q, "svc", t0, Duration::ZERO);
        assert!(
            q.add_coalesced("svc", WINDOW, t0),
            "a sync that took no time"
        );
        assert_eq!(q.pop(t0), Some("svc"));
        q.done(&"svc", t0 + ms(1));
        assert!(
            !q.add_coalesced("svc", WINDOW, t0 + ms(2)),
            "1 ms: held 3 ms"
        );
        assert_eq!(q.next_due(), Some(t0 + ms(4)));
    }

    #[test]
    fn a_burst_holds_changes_three_times_its_last_syncs_turn_and_merges_them() {
        let (mut q, t0) = queue();
        burst(&mut q, "svc", t0, LOADED);
        for at in [5, 30, 55] {
            assert!(!q.add_coalesced("svc", WINDOW, t0 + ms(at)), "held");
        }
        assert_eq!(q.pop(t0 + ms(59)), None);
        assert_eq!(q.next_due(), Some(t0 + ms(60)));
        assert_eq!(q.pop(t0 + ms(60)), Some("svc"));
        q.done(&"svc", t0 + ms(80));
        assert_eq!(q.pop(t0 + ms(500)), None, "the merged adds made one sync");
    }

    #[test]
    fn the_hold_never_exceeds_the_window() {
        let (mut q, t0) = queue();
        burst(&mut q, "svc", t0, ms(80));
        assert!(!q.add_coalesced("svc", WINDOW, t0 + ms(10)));
        assert_eq!(q.next_due(), Some(t0 + WINDOW), "240 ms capped at 100");
    }

    /// One sync carrying three adds that took `took`, done at `t`.
    fn batch(q: &mut QueueCore<&'static str>, key: &'static str, t: Instant, took: Duration) {
        for _ in 0..3 {
            q.add_coalesced(key, WINDOW, t - took);
        }
        assert_eq!(q.pop(t - took), Some(key));
        q.done(&key, t);
    }

    #[test]
    fn after_a_sync_that_carried_a_batch_the_next_wave_gathers_for_its_hold() {
        let (mut q, t0) = queue();
        batch(&mut q, "svc", t0, LOADED);
        // Past the hold, within two burst gaps (the test's gap is one window).
        assert!(!q.add_coalesced("svc", WINDOW, t0 + ms(150)), "gathers");
        assert_eq!(q.next_due(), Some(t0 + ms(210)));
        // A withdrawal names a shorter window and overtakes.
        q.add_coalesced("svc", ms(25), t0 + ms(160));
        assert_eq!(q.next_due(), Some(t0 + ms(185)));
        assert_eq!(q.pop(t0 + ms(185)), Some("svc"));
    }

    #[test]
    fn after_a_batch_against_an_idle_api_server_the_next_wave_is_not_held() {
        let (mut q, t0) = queue();
        batch(&mut q, "svc", t0, Duration::ZERO);
        assert!(q.add_coalesced("svc", WINDOW, t0 + ms(150)));
    }

    #[test]
    fn a_small_sync_at_the_end_of_a_batch_burst_keeps_the_next_wave_gathering() {
        let (mut q, t0) = queue();
        batch(&mut q, "svc", t0, LOADED);
        // A straggler synced within the burst gap carries one add.
        sync(&mut q, "svc", t0 + ms(50), LOADED);
        assert!(!q.add_coalesced("svc", WINDOW, t0 + ms(200)), "gathers");
        assert_eq!(q.next_due(), Some(t0 + ms(260)));
    }

    #[test]
    fn a_batch_long_ago_or_syncs_of_single_changes_do_not_hold_a_change_back() {
        let (mut q, t0) = queue();
        batch(&mut q, "svc", t0, LOADED);
        assert!(
            q.add_coalesced("svc", WINDOW, t0 + ms(200)),
            "two burst gaps have passed"
        );
        q.pop(t0 + ms(200));
        q.done(&"svc", t0 + ms(220));
        assert!(
            q.add_coalesced("svc", WINDOW, t0 + ms(340)),
            "that sync carried one change: not a batch"
        );
    }

    #[test]
    fn an_add_while_syncing_waits_that_syncs_hold_after_it() {
        let (mut q, t0) = queue();
        q.add_coalesced("svc", WINDOW, t0);
        q.pop(t0);
        q.add_coalesced("svc", WINDOW, t0 + ms(2));
        q.done(&"svc", t0 + ms(20));
        assert_eq!(q.pop(t0 + ms(21)), None);
        assert_eq!(q.next_due(), Some(t0 + ms(80)));
        assert_eq!(q.pop(t0 + ms(80)), Some("svc"));
    }

    #[test]
    fn an_add_while_a_quick_sync_runs_is_handed_out_right_after_it() {
        let (mut q, t0) = queue();
        q.add_coalesced("svc", WINDOW, t0);
        q.pop(t0);
        q.add_coalesced("svc", WINDOW, t0);
        q.done(&"svc", t0);
        assert_eq!(q.pop(t0), Some("svc"));
    }

    #[test]
    fn a_shorter_window_overtakes_a_longer_one_already_waiting() {
        let (mut q, t0) = queue();
        burst(&mut q, "svc", t0, ms(40));
        q.add_coalesced("svc", WINDOW, t0 + ms(10));
        q.add_coalesced("svc", ms(30), t0 + ms(20));
        assert_eq!(q.next_due(), Some(t0 + ms(30)));
        // And while syncing, the shortest window asked for caps the hold after it.
        assert_eq!(q.pop(t0 + ms(30)), Some("svc"));
        q.add_coalesced("svc", ms(30), t0 + ms(31));
        q.add_coalesced("svc", WINDOW, t0 + ms(32));
        q.done(&"svc", t0 + ms(70));
        assert_eq!(q.next_due(), Some(t0 + ms(100)));
    }

    #[test]
    fn a_plain_add_never_waits_behind_coalesced_adds() {
        let (mut q, t0) = queue();
        burst(&mut q, "svc", t0 + ms(1), LOADED);
        q.add_coalesced("svc", WINDOW, t0 + ms(10));
        // A plain add overtakes the waiting one.
        assert!(q.add("svc"));
        assert_eq!(q.pop(t0 + ms(11)), Some("svc"));
        // Also while the key is being synced: queued again as soon as it is done.
        q.add("svc");
        q.done(&"svc", t0 + ms(40));
        assert_eq!(q.pop(t0 + ms(40)), Some("svc"));
    }

    #[test]
    fn other_keys_are_not_held_back_and_a_cooled_key_is_idle_again() {
        let (mut q, t0) = queue();
        burst(&mut q, "a", t0, LOADED);
        assert!(q.add_coalesced("b", WINDOW, t0 + ms(1)));
        assert_eq!(q.pop(t0 + ms(1)), Some("b"));
        assert!(
            q.add_coalesced("a", WINDOW, t0 + ms(150)),
            "the hold has passed"
        );
    }

    #[test]
    fn a_client_with_half_its_burst_spent_holds_a_burst_for_the_whole_window() {
        let (mut q, t0) = queue();
        burst(&mut q, "svc", t0, ms(1));
        q.set_budget_spent(SPENT_FOR_FULL_HOLD);
        assert!(!q.add_coalesced("svc", WINDOW, t0 + ms(1)));
        assert_eq!(
            q.next_due(),
            Some(t0 + WINDOW),
            "not 3 ms: the whole window"
        );
    }

    #[test]
    fn a_client_a_quarter_into_its_burst_holds_half_the_window() {
        let (mut q, t0) = queue();
        burst(&mut q, "svc", t0, ms(1));
        q.set_budget_spent(0.25);
        assert!(!q.add_coalesced("svc", WINDOW, t0 + ms(1)));
        assert_eq!(q.next_due(), Some(t0 + WINDOW / 2));
        // The longer of the two measures wins: a slow sync still holds 3 × its turn.
        let (mut q, t0) = queue();
        burst(&mut q, "svc", t0, LOADED);
        q.set_budget_spent(0.1);
        q.add_coalesced("svc", WINDOW, t0);
        assert_eq!(
            q.next_due(),
            Some(t0 + ms(60)),
            "3 × 20 ms > 20 % of 100 ms"
        );
    }

    #[test]
    fn a_spent_budget_holds_an_add_made_while_syncing_after_it() {
        let (mut q, t0) = queue();
        q.add_coalesced("svc", WINDOW, t0);
        q.pop(t0);
        q.add_coalesced("svc", WINDOW, t0);
        q.set_budget_spent(1.0);
        q.done(&"svc", t0);
        assert_eq!(q.pop(t0), None);
        assert_eq!(q.next_due(), Some(t0 + WINDOW));
    }

    #[test]
    fn a_turn_counts_from_when_the_key_was_ready_not_from_when_a_worker_took_it() {
        let (mut q, t0) = queue();
        burst(&mut q, "svc", t0, Duration::ZERO);
        // Ready at once (an idle hold), but no worker or token for 20 ms.
        assert!(q.add_coalesced("svc", WINDOW, t0 + ms(1)));
        assert_eq!(q.pop(t0 + ms(21)), Some("svc"));
        q.done(&"svc", t0 + ms(26));
        assert!(!q.add_coalesced("svc", WINDOW, t0 + ms(27)));
        assert_eq!(q.next_due(), Some(t0 + ms(26) + ms(75)), "3 × (20 + 5) ms");
    }

    #[test]
    fn without_coalescing_coalescible_adds_are_plain_adds() {
        let mut q = QueueCore::new(RateLimit::ENDPOINT_SLICE);
        let t0 = Instant::now() + ms(1000);
        burst(&mut q, "svc", t0, LOADED);
        assert!(q.add_coalesced("svc", WINDOW, t0));
        assert_eq!(q.pop(t0), Some("svc"));
    }
}
