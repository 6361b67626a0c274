//! Time for `creationTimestamp` and `deletionTimestamp`.
//!
//! Scenario tests run on a paused tokio clock, so the default clock is a fixed start instant
//! plus the tokio time elapsed since the fake was built: timestamps then advance exactly as
//! `tokio::time::advance` does, and the same test gives the same timestamps every run.

use std::fmt;

use jiff::Timestamp;

/// Where the fake reads the wall time from. Implement it to drive timestamps by hand.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current wall time.
    fn now(&self) -> Timestamp;
}

/// 2026-01-01T00:00:00Z, the default start of fake time.
pub const DEFAULT_START_SECONDS: i64 = 1_767_225_600;

/// A fixed start plus tokio's elapsed time (follows a paused clock).
#[derive(Debug)]
pub struct TokioClock {
    start: Timestamp,
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// Starts at `start`, now.
    pub fn starting_at(start: Timestamp) -> Self {
        Self {
            start,
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        let start = Timestamp::from_second(DEFAULT_START_SECONDS).unwrap_or(Timestamp::UNIX_EPOCH);
        Self::starting_at(start)
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        self.start
            .checked_add(self.origin.elapsed())
            .unwrap_or(self.start)
    }
}

/// RFC 3339 with whole seconds, as Kubernetes serialises `metav1.Time`.
pub(crate) fn format_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn follows_paused_tokio_time() {
        let clock = TokioClock::default();
        assert_eq!(format_time(clock.now()), "2026-01-01T00:00:00Z");
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(format_time(clock.now()), "2026-01-01T00:01:01Z");
    }
}
