//! Start-up errors of the long-running subcommands, run on the real binary: each
//! cause is said once.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `svcplane <args>` (which must exit on its own within 30 s): exit code and stderr.
fn svcplane(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_svcplane"))
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("KUBECONFIG")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn svcplane");
    let start = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("svcplane {args:?} did not exit within 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const MISSING: &str = "/nonexistent/svcplane-test/kubeconfig";

#[test]
fn a_missing_kubeconfig_is_reported_once_by_webhook() {
    let (code, stderr) = svcplane(&[
        "webhook",
        "--kubeconfig",
        MISSING,
        "--tls-cert-file",
        "/nonexistent/tls.crt",
        "--tls-private-key-file",
        "/nonexistent/tls.key",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("--kubeconfig {MISSING}: cannot read")),
        "{stderr}"
    );
}

#[test]
fn a_missing_kubeconfig_is_reported_once_by_run() {
    let (code, stderr) = svcplane(&[
        "run",
        "--webhook=false",
        "--metrics-bind-address",
        "127.0.0.1:0",
        "--kubeconfig",
        MISSING,
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("--kubeconfig {MISSING}: cannot read")),
        "{stderr}"
    );
}
