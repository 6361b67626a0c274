//! One warning per outage (WH-15.2).
//!
//! Why: an API-server restart is routine (upgrades, control-plane rotation), and a
//! retry loop that logs every failed attempt at WARN or ERROR fires log-based alerts
//! for it. Like upstream's reflectors, a resource's first retriable failure of an
//! outage is a warning, the retries after it are informational, and the first success
//! after them says so once. ERROR is left for what the operator must act on.

use std::fmt::Display;
use std::time::Duration;

use tracing::{Level, info, warn};

/// Whether one resource's requests are currently failing.
#[derive(Debug, Default, Clone)]
pub struct Outage {
    /// Failures since the last success (0: no outage).
    failures: u32,
}

impl Outage {
    /// Whether the last attempt failed.
    pub fn is_down(&self) -> bool {
        self.failures > 0
    }

    /// Records a retriable failure of `resource` and logs it: WARN for the first of an
    /// outage, INFO for the retries after it. Returns the level used.
    pub fn failed(
        &mut self,
        resource: &str,
        what: &str,
        error: &dyn Display,
        retry_in: Duration,
    ) -> Level {
        self.failures = self.failures.saturating_add(1);
        let retry_in_ms = u64::try_from(retry_in.as_millis()).unwrap_or(u64::MAX);
        if self.failures == 1 {
            warn!(resource, error = %error, retry_in_ms, "{what}; retrying (further failures until it recovers are logged at info)");
            Level::WARN
        } else {
            info!(resource, error = %error, retry_in_ms, failures = self.failures, "{what}; still retrying");
            Level::INFO
        }
    }

    /// Records a success. If it ends an outage, logs that once at INFO and returns
    /// how many attempts had failed.
    pub fn recovered(&mut self, resource: &str, what: &str) -> Option<u32> {
        let failures = std::mem::take(&mut self.failures);
        (failures > 0).then(|| {
            info!(resource, failures, "{what}: recovered");
            failures
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const E: &str = "client error (Connect)";

    fn fail(o: &mut Outage) -> Level {
        o.failed("pods", "watch failed", &E, Duration::from_secs(1))
    }

    #[test]
    fn rule_15_2_one_warning_per_outage_then_info_and_one_recovery_line() {
        let mut o = Outage::default();
        assert_eq!(o.recovered("pods", "watch"), None, "no outage, no line");
        let levels: Vec<Level> = (0..5).map(|_| fail(&mut o)).collect();
        assert_eq!(levels[0], Level::WARN);
        assert!(levels[1..].iter().all(|l| *l == Level::INFO), "{levels:?}");
        assert!(o.is_down());
        assert_eq!(o.recovered("pods", "watch"), Some(5));
        assert_eq!(o.recovered("pods", "watch"), None, "recovery is said once");
        // The next outage warns again, once.
        assert_eq!(fail(&mut o), Level::WARN);
        assert_eq!(fail(&mut o), Level::INFO);
    }

    #[test]
    fn rule_15_2_outages_are_per_resource() {
        let (mut pods, mut services) = (Outage::default(), Outage::default());
        assert_eq!(fail(&mut pods), Level::WARN);
        assert_eq!(fail(&mut services), Level::WARN);
        assert_eq!(fail(&mut pods), Level::INFO);
    }
}
