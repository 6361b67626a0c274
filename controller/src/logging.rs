//! Log levels: klog's `-v N` on top of `RUST_LOG`.
//!
//! Kubernetes components take `-v`/`--v N` (klog verbosity); Rust programs take
//! `RUST_LOG` (tracing's `EnvFilter` directives). svcplane accepts both:
//!
//! | `-v` | filter | klog's meaning |
//! | --- | --- | --- |
//! | (none) | `RUST_LOG`, else the subcommand's default (`info,kube=warn`; `plan`: `warn`) | |
//! | 0–2 | `info,kube=warn` | 2 is kube-controller-manager's usual production level |
//! | 3 | svcplane's crates at `debug`, `kube` at `info`, the rest `info` | extended information about changes |
//! | 4 | `debug`, HTTP/TLS internals at `info` | debug |
//! | 5 | svcplane's crates at `trace`, the rest as 4 | trace |
//! | 6+ | `trace` | everything |
//!
//! With both, `-v` sets the level and `RUST_LOG` refines it per target: each
//! per-target `RUST_LOG` directive (`kube=trace`) replaces the base's directive for
//! that target or adds one, while a bare level in `RUST_LOG` (`info`) gives way to
//! `-v`. So `-v 4` with the chart's `RUST_LOG=info,kube=warn` is "debug, kube at
//! warn": adding `--v` never needs `RUST_LOG` to be cleared first.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// svcplane's own crates (targets are module paths; the binary's is `svcplane`).
const OWN: [&str; 4] = [
    "svcplane",
    "svcplane_controller",
    "svcplane_webhook",
    "svcplane_allocator",
];
/// Chatty transport crates kept at `info` below `-v 6`.
const TRANSPORT: [&str; 7] = [
    "hyper",
    "hyper_util",
    "h2",
    "rustls",
    "tower",
    "axum",
    "tokio_util",
];

/// The base filter for a klog verbosity.
pub fn verbosity_filter(v: u8) -> String {
    let own = |level: &str| OWN.map(|t| format!("{t}={level}")).join(",");
    let transport = TRANSPORT.map(|t| format!("{t}=info")).join(",");
    match v {
        0..=2 => "info,kube=warn".to_owned(),
        3 => format!("info,kube=info,{}", own("debug")),
        4 => format!("debug,{transport}"),
        5 => format!("debug,{transport},{}", own("trace")),
        _ => "trace".to_owned(),
    }
}

/// The directive's target part (what a later directive for the same target replaces);
/// empty for a bare level.
fn directive_key(directive: &str) -> &str {
    match directive.rsplit_once('=') {
        Some((target, _)) => target,
        None => "",
    }
}

/// kube's HTTP layer: it logs every failed request at ERROR (`failed with error client
/// error (Connect)`). During an API-server restart that is dozens of ERROR lines for
/// what svcplane's retry loops already report once per outage at WARN (WH-15.2), and
/// log-based alerts would fire on a routine control-plane restart.
const KUBE_REQUEST_LOG: &str = "kube_client::client::builder";

/// Turns [`KUBE_REQUEST_LOG`] off unless the filter names it or asks for debug or
/// trace anywhere (then the per-request lines are what the operator is after).
fn quiet_request_failures(directives: String) -> String {
    let verbose = directives.split(',').any(|d| {
        let level = d.rsplit('=').next().unwrap_or_default().trim();
        level.eq_ignore_ascii_case("debug") || level.eq_ignore_ascii_case("trace")
    });
    let named = directives
        .split(',')
        .any(|d| directive_key(d.trim()).starts_with(KUBE_REQUEST_LOG));
    if verbose || named {
        directives
    } else {
        format!("{directives},{KUBE_REQUEST_LOG}=off")
    }
}

/// The filter directives for `-v` (`verbosity`), `RUST_LOG` (`rust_log`) and the
/// subcommand's `default`, combined as the module docs say, with kube's per-request
/// failure lines off at the default levels ([`quiet_request_failures`]).
pub fn filter_directives(verbosity: Option<u8>, rust_log: Option<&str>, default: &str) -> String {
    quiet_request_failures(combine(verbosity, rust_log, default))
}

fn combine(verbosity: Option<u8>, rust_log: Option<&str>, default: &str) -> String {
    let rust_log = rust_log.map(str::trim).filter(|s| !s.is_empty());
    let base = match (verbosity, rust_log) {
        (Some(v), _) => verbosity_filter(v),
        (None, Some(env)) => return env.to_owned(),
        (None, None) => return default.to_owned(),
    };
    let mut merged: Vec<String> = base.split(',').map(str::to_owned).collect();
    for d in rust_log.unwrap_or_default().split(',') {
        let d = d.trim();
        let key = directive_key(d);
        // A bare level gives way to -v; a per-target directive refines it.
        if d.is_empty() || key.is_empty() {
            continue;
        }
        merged.retain(|m| directive_key(m) != key);
        merged.push(d.to_owned());
    }
    merged.join(",")
}

/// Initialise logging to stderr with the combined filter.
pub fn init(verbosity: Option<u8>, default: &str, format: LogFormat) {
    let env = std::env::var("RUST_LOG").ok();
    let directives = filter_directives(verbosity, env.as_deref(), default);
    let filter = EnvFilter::try_new(&directives).unwrap_or_else(|e| {
        // Logging is not up yet: stderr is the only place to say it.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("ignoring invalid log filter {directives:?}: {e}\n").as_bytes(),
        );
        EnvFilter::new(default)
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_request_failures_are_off_at_default_levels_and_on_when_asked_wh_15_2() {
        let off = ",kube_client::client::builder=off";
        assert_eq!(
            filter_directives(None, None, "info,kube=warn"),
            format!("info,kube=warn{off}")
        );
        assert_eq!(
            filter_directives(Some(2), Some("info,kube=warn"), "info"),
            format!("info,kube=warn{off}")
        );
        // Debug anywhere, or the target named: left as asked.
        assert!(!filter_directives(Some(4), None, "info").contains(off));
        assert!(!filter_directives(None, Some("info,kube=debug"), "info").contains(off));
        assert_eq!(
            filter_directives(
                None,
                Some("info,kube_client::client::builder=error"),
                "info"
            ),
            "info,kube_client::client::builder=error"
        );
    }

    #[test]
    fn without_v_rust_log_wins_else_the_default() {
        assert_eq!(combine(None, None, "info,kube=warn"), "info,kube=warn");
        assert_eq!(combine(None, Some("debug"), "info"), "debug");
        assert_eq!(combine(None, Some("  "), "warn"), "warn");
    }

    #[test]
    fn v_levels_follow_klog_conventions() {
        for v in 0..=2 {
            assert_eq!(verbosity_filter(v), "info,kube=warn");
        }
        assert!(verbosity_filter(3).contains("svcplane_controller=debug"));
        assert!(verbosity_filter(3).starts_with("info,"));
        assert!(verbosity_filter(4).starts_with("debug,"));
        assert!(verbosity_filter(4).contains("hyper=info"));
        assert!(verbosity_filter(5).contains("svcplane_webhook=trace"));
        assert_eq!(verbosity_filter(6), "trace");
        assert_eq!(verbosity_filter(10), "trace");
        for v in 0..=10 {
            EnvFilter::try_new(verbosity_filter(v)).unwrap();
        }
    }

    #[test]
    fn rust_log_refines_v_target_by_target() {
        let f = filter_directives(Some(4), Some("kube=trace"), "info");
        assert!(f.starts_with("debug,"), "{f}");
        assert!(f.ends_with(",kube=trace"), "{f}");
        // A bare level in RUST_LOG gives way to -v.
        assert_eq!(combine(Some(3), Some("warn"), "info"), verbosity_filter(3));
        // The chart's default RUST_LOG with --v=4: debug, and kube stays at warn.
        let f = filter_directives(Some(4), Some("info,kube=warn"), "info");
        assert_eq!(
            f.split(',')
                .filter(|d| !d.contains('='))
                .collect::<Vec<_>>(),
            ["debug"]
        );
        assert!(f.contains("kube=warn") && f.contains("hyper=info"), "{f}");
        EnvFilter::try_new(&f).unwrap();
    }
}
