//! Fault injection: make chosen requests fail or slow down, to test retries and backoff.
//!
//! Rules are checked in the order they were added. A rule fires when its verb and resource
//! match, its `times` budget is not used up and its `probability` draw (from a seeded RNG)
//! succeeds. A firing rule adds its latency (slept with `tokio::time::sleep`, so a paused
//! clock skips it) and, if it has a status, answers that error instead of running the
//! request; later rules are then not consulted. A watch faulted with 410 gets a normal 200
//! stream carrying one `ERROR` event with an `Expired` Status, as the real server sends.

use std::time::Duration;

use super::rng::Rng;
use super::stats::Verb;

/// One fault rule. Build with [`Fault::status`] or [`Fault::latency`] and narrow it down.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fault {
    /// Only this verb (all verbs when `None`).
    pub verb: Option<Verb>,
    /// Only this resource: a plural (`services`, also matches `services/status`) or
    /// `plural/subresource` (all resources when `None`).
    pub resource: Option<String>,
    /// Answer with this HTTP status (500, 429, 409, 410, 503, 504, ...). 429 carries
    /// `Retry-After: 1`.
    pub status: Option<u16>,
    /// Fire at most this many times (unlimited when `None`).
    pub times: Option<usize>,
    /// Fire with this probability, drawn from the seeded RNG (always when `None`).
    pub probability: Option<f64>,
    /// Delay the request by this much before answering.
    pub latency: Option<Duration>,
}

impl Fault {
    /// Fail matching requests with `code`.
    pub fn status(code: u16) -> Self {
        Self {
            status: Some(code),
            ..Self::default()
        }
    }

    /// Delay matching requests.
    pub fn latency(delay: Duration) -> Self {
        Self {
            latency: Some(delay),
            ..Self::default()
        }
    }

    /// Only requests of this verb.
    #[must_use]
    pub fn verb(mut self, verb: Verb) -> Self {
        self.verb = Some(verb);
        self
    }

    /// Only requests for this resource (`pods`, `services/status`).
    #[must_use]
    pub fn resource(mut self, resource: &str) -> Self {
        self.resource = Some(resource.to_string());
        self
    }

    /// At most `n` times.
    #[must_use]
    pub fn times(mut self, n: usize) -> Self {
        self.times = Some(n);
        self
    }

    /// With probability `p` (0.0..=1.0) each time.
    #[must_use]
    pub fn probability(mut self, p: f64) -> Self {
        self.probability = Some(p);
        self
    }

    /// Also delay by `delay`.
    #[must_use]
    pub fn with_latency(mut self, delay: Duration) -> Self {
        self.latency = Some(delay);
        self
    }

    fn matches(&self, verb: Verb, resource: &str) -> bool {
        let verb_ok = self.verb.is_none_or(|v| v == verb);
        let resource_ok = self.resource.as_deref().is_none_or(|r| {
            r == resource || resource.split('/').next().is_some_and(|plural| r == plural)
        });
        verb_ok && resource_ok
    }
}

/// Handle to remove a rule again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FaultId(u64);

/// What the rules decided for one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) latency: Duration,
    pub(crate) status: Option<u16>,
}

/// The active rules.
#[derive(Debug)]
pub(crate) struct FaultSet {
    rules: Vec<(FaultId, Fault)>,
    next_id: u64,
    rng: Rng,
}

impl FaultSet {
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            rules: Vec::new(),
            next_id: 0,
            rng: Rng::new(seed ^ 0x0FA0_17FA_0175),
        }
    }

    pub(crate) fn add(&mut self, fault: Fault) -> FaultId {
        self.next_id += 1;
        let id = FaultId(self.next_id);
        self.rules.push((id, fault));
        id
    }

    pub(crate) fn remove(&mut self, id: FaultId) {
        self.rules.retain(|(i, _)| *i != id);
    }

    pub(crate) fn clear(&mut self) {
        self.rules.clear();
    }

    /// Decides, and uses up `times` budgets of the rules that fire.
    pub(crate) fn evaluate(&mut self, verb: Verb, resource: &str) -> Outcome {
        let mut out = Outcome::default();
        for (_, rule) in &mut self.rules {
            if !rule.matches(verb, resource) || rule.times == Some(0) {
                continue;
            }
            if let Some(p) = rule.probability
                && self.rng.unit() >= p
            {
                continue;
            }
            if let Some(n) = rule.times.as_mut() {
                *n -= 1;
            }
            out.latency += rule.latency.unwrap_or_default();
            if rule.status.is_some() {
                out.status = rule.status;
                break;
            }
        }
        self.rules.retain(|(_, r)| r.times != Some(0));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_budget_and_matching() {
        let mut set = FaultSet::new(1);
        set.add(
            Fault::status(500)
                .verb(Verb::Create)
                .resource("services")
                .times(2),
        );
        assert_eq!(set.evaluate(Verb::Get, "services").status, None);
        assert_eq!(set.evaluate(Verb::Create, "pods").status, None);
        assert_eq!(set.evaluate(Verb::Create, "services").status, Some(500));
        assert_eq!(
            set.evaluate(Verb::Create, "services/status").status,
            Some(500)
        );
        assert_eq!(set.evaluate(Verb::Create, "services").status, None);
    }

    #[test]
    fn probability_is_seeded() {
        let run = || {
            let mut set = FaultSet::new(42);
            set.add(Fault::status(503).probability(0.5));
            (0..64)
                .map(|_| set.evaluate(Verb::Get, "pods").status.is_some())
                .collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        let fired = a.iter().filter(|f| **f).count();
        assert!((16..48).contains(&fired), "{fired}");
    }
}
