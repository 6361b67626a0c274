//! Process figures from `/proc` (CPU time, resident memory) and heap accounting through
//! an optional instrumented global allocator.
//!
//! `/proc/self/stat` gives user and system time of all threads in clock ticks; Linux
//! reports them in USER_HZ, which is 100 on every architecture it exposes to user space,
//! so the resolution is 10 ms. `VmHWM` is the kernel's peak resident set size of the
//! process. The fake API server lives in the same process, so memory figures are split
//! by sampling before the runtime starts.

use std::alloc::System;
use std::sync::Arc;

use stats_alloc::{Region, StatsAlloc};

use crate::fake_api::FakeApi;

/// USER_HZ (see the module docs).
pub const TICKS_PER_SECOND: f64 = 100.0;

/// User plus system CPU seconds of this process so far.
pub fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    Some(parse_cpu_ticks(&stat)? as f64 / TICKS_PER_SECOND)
}

/// utime + stime, in clock ticks, from the text of a `/proc/<pid>/stat`.
pub fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    // The command name may hold spaces; fields restart after its closing parenthesis.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state), so utime (14) and stime (15) are at 11 and 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// A `/proc/self/status` size field (`VmRSS`, `VmHWM`) in bytes.
pub fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_status_bytes(&status, field)
}

/// A size field (`VmRSS`, `VmHWM`) of the text of a `/proc/<pid>/status`, in bytes.
pub fn parse_status_bytes(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let v = l.strip_prefix(field)?.strip_prefix(':')?;
        let kb: u64 = v.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kb * 1024)
    })
}

/// Current resident set size.
pub fn rss() -> Option<u64> {
    status_bytes("VmRSS")
}

/// Peak resident set size of the process so far.
pub fn peak_rss() -> Option<u64> {
    status_bytes("VmHWM")
}

/// The instrumented global allocator, when the binary installed one.
pub type Heap = Option<&'static StatsAlloc<System>>;

/// Heap bytes in use, if the allocator is instrumented.
pub fn heap_in_use(heap: Heap) -> Option<u64> {
    let s = heap?.stats();
    Some(s.bytes_allocated.saturating_sub(s.bytes_deallocated) as u64)
}

/// Bytes of heap per Pod that the runtime's Pod store keeps: every Pod of the fake
/// decoded from its JSON bytes (as the watch receives it), stripped and inserted the way
/// the watch does, divided into the heap the store retains.
pub fn bytes_per_cached_pod(heap: Heap, fake: &FakeApi) -> Option<f64> {
    use k8s_openapi::api::core::v1::Pod;
    use svcplane_controller::shell::cache::{PodStore, Store, strip};
    let heap = heap?;
    let docs: Vec<Vec<u8>> = fake
        .list_json("v1/pods", None)
        .iter()
        .filter_map(|v| serde_json::to_vec(v).ok())
        .collect();
    if docs.is_empty() {
        return None;
    }
    let mut store = PodStore::default();
    let region = Region::new(heap);
    for d in &docs {
        if let Ok(pod) = serde_json::from_slice::<Pod>(d) {
            store.upsert(Arc::new(strip::pod(pod)));
        }
    }
    let change = region.change();
    // stats_alloc books reallocations into both totals already.
    let kept = change
        .bytes_allocated
        .saturating_sub(change.bytes_deallocated);
    let per = kept as f64 / store.len().max(1) as f64;
    drop(store);
    Some(per)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_figures_parse() {
        assert!(cpu_seconds().is_some());
        let (rss, peak) = (rss().unwrap(), peak_rss().unwrap());
        assert!(rss > 0 && peak >= rss);
    }
}
