//! CPU time and peak memory of a controller process, read from `/proc/<pid>`.
//!
//! Both controllers run as processes the bench started, so their figures come from
//! the kernel's own accounting and cover every thread: `utime + stime` of
//! `/proc/<pid>/stat` (in USER_HZ ticks, 100 a second on every Linux architecture, see
//! [`crate::sim::measure`]) and `VmHWM`, the peak resident set, of `/proc/<pid>/status`.
//! CPU is reported as the difference of two samples around a workload; the peak is
//! whatever the process reached since it started.

use anyhow::Context;

use crate::sim::measure::{TICKS_PER_SECOND, parse_cpu_ticks, parse_status_bytes};

/// One reading of a process' figures.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    /// User plus system CPU seconds since the process started.
    pub cpu_seconds: f64,
    /// Peak resident set size so far, in bytes.
    pub peak_rss: u64,
}

/// Reads `pid`'s figures now.
pub fn sample(pid: u32) -> anyhow::Result<Sample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    parse(&stat, &status).with_context(|| format!("parsing /proc/{pid}/stat and status"))
}

/// A [`Sample`] from the texts of `/proc/<pid>/stat` and `/proc/<pid>/status`.
pub fn parse(stat: &str, status: &str) -> Option<Sample> {
    Some(Sample {
        cpu_seconds: parse_cpu_ticks(stat)? as f64 / TICKS_PER_SECOND,
        peak_rss: parse_status_bytes(status, "VmHWM")?,
    })
}

/// The CPU seconds spent between two samples, and the peak at the later one.
pub fn delta(before: Sample, after: Sample) -> Sample {
    Sample {
        cpu_seconds: (after.cpu_seconds - before.cpu_seconds).max(0.0),
        peak_rss: after.peak_rss,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_command_name_with_spaces_and_parentheses() {
        // Fields 14 and 15 (utime, stime) are 250 and 70 ticks.
        let stat = "4242 (kube (cm) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 70 0 0 20 0 \
                    12 0 100 1000000 5000 18446744073709551615";
        let status = "Name:\tkube\nVmPeak:\t  900 kB\nVmHWM:\t  307200 kB\nVmRSS:\t 1000 kB\n";
        let s = parse(stat, status).unwrap();
        assert!((s.cpu_seconds - 3.2).abs() < 1e-9);
        assert_eq!(s.peak_rss, 307_200 * 1024);
        assert_eq!(parse("garbage", status), None);
    }

    #[test]
    fn reads_this_process_and_subtracts() {
        let now = sample(std::process::id()).unwrap();
        assert!(now.peak_rss > 0);
        let before = Sample {
            cpu_seconds: now.cpu_seconds + 1.0,
            peak_rss: 1,
        };
        assert_eq!(delta(before, now).cpu_seconds, 0.0);
        assert_eq!(delta(before, now).peak_rss, now.peak_rss);
    }
}
