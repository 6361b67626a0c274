//! How long the EndpointSlice and Endpoints controllers let a busy Service's
//! changes gather before writing them (`--write-coalescing-window`): one value
//! both the flags and the controllers' queues read, so neither imports the other.

/// Write coalescing of the EndpointSlice and Endpoints controllers
/// (`--write-coalescing-window`; `shell::queue`): the most a Pod change of a Service in
/// a burst waits after its last sync to be merged with the changes that follow it (the
/// wait itself follows how long that sync took). Changes that withdraw an endpoint may
/// wait far less than those that add one, and never behind them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Coalescing {
    /// For a Pod added or turning ready.
    pub additions: std::time::Duration,
    /// For a Pod withdrawn (not ready, terminating, gone, relabelled, re-addressed).
    pub withdrawals: std::time::Duration,
}

impl Coalescing {
    /// No coalescing: every change is synced at once, as upstream.
    pub const OFF: Coalescing = Coalescing {
        additions: std::time::Duration::ZERO,
        withdrawals: std::time::Duration::ZERO,
    };

    /// From `--write-coalescing-window`: additions wait up to the window, withdrawals
    /// a quarter of it.
    pub fn from_window(window: std::time::Duration) -> Self {
        Self {
            additions: window,
            withdrawals: window / 4,
        }
    }

    pub fn is_off(&self) -> bool {
        self.additions.is_zero() && self.withdrawals.is_zero()
    }

    /// Two syncs of a Service closer than this make a burst, whose changes are held
    /// (zero when coalescing is off). Four windows: a rollout's pauses
    /// between steps do not end its burst, while a Service changing now and then
    /// (readiness churn) is rarely in one.
    pub fn burst_gap(&self) -> std::time::Duration {
        self.additions.max(self.withdrawals) * 4
    }
}
