//! Golden and error-path tests of `svcplane explain`, run on the real binaries
//! (`svcplane` and the kubectl plugin `kubectl-svcplane`), offline; and of
//! `svcplane migrate`, which reads a dump the same way (its golden and input are in
//! `tests/golden/migrate/`).
//!
//! Goldens live in `tests/golden/explain/`, the input made for them in
//! `tests/golden/explain/inputs/demo.yaml` (a Pod for nearly every reason);
//! the shipped example is `examples/cluster.yaml`. After an intended change
//! to the output, regenerate with
//!
//!     UPDATE_GOLDEN=1 cargo test -p svcplane-controller --test explain_cli
//!
//! and review the diff (`git diff controller/tests/golden/explain`).

// Helpers outside `#[test]` functions are test code too.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run_bin(bin: &str, args: &[&str], stdin: &[u8]) -> Run {
    let mut child = Command::new(bin)
        .args(args)
        .current_dir(root())
        .env_remove("RUST_LOG")
        .env_remove("KUBECONFIG")
        .env_remove("SVCPLANE_SERVICE_CLUSTER_IP_RANGE")
        .env_remove("SVCPLANE_SERVICE_NODE_PORT_RANGE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut pipe = child.stdin.take().expect("stdin is piped");
    let _ = pipe.write_all(stdin);
    drop(pipe);
    let out = child.wait_with_output().expect("wait");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    }
}

fn explain(args: &[&str]) -> Run {
    let mut argv = vec!["explain"];
    argv.extend_from_slice(args);
    run_bin(env!("CARGO_BIN_EXE_svcplane"), &argv, b"")
}

const EXAMPLE: &str = "examples/cluster.yaml";
const DEMO: &str = "tests/golden/explain/inputs/demo.yaml";
/// The one warning reading the demo input gives.
const DEMO_WARNING: &str = "warning: tests/golden/explain/inputs/demo.yaml: document 18 (ConfigMap demo/settings): kind not used by explain, skipped";

/// Asserts success with exactly `stderr` lines, returns stdout.
fn ok(run: Run, stderr: &[&str]) -> String {
    assert_eq!(run.code, Some(0), "expected success: {run:#?}");
    let got: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(got, stderr, "stderr: {run:#?}");
    run.stdout
}

fn fails(run: &Run, code: i32) -> &str {
    assert_eq!(run.code, Some(code), "exit code: {run:#?}");
    assert_eq!(run.stdout, "", "stdout must be empty on error: {run:#?}");
    &run.stderr
}

fn golden(name: &str, actual: &str) {
    let path = root().join("tests/golden/explain").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}\nregenerate with: UPDATE_GOLDEN=1 cargo test -p svcplane-controller --test explain_cli",
            path.display()
        )
    });
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(e, a)| e != a)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        panic!(
            "output differs from {} at line {}:\n- {}\n+ {}\nIf the change is intended, regenerate with:\n  \
             UPDATE_GOLDEN=1 cargo test -p svcplane-controller --test explain_cli",
            path.display(),
            first + 1,
            expected.lines().nth(first).unwrap_or("<end>"),
            actual.lines().nth(first).unwrap_or("<end>"),
        );
    }
}

// ------------------------------------------------------------ the four forms

#[test]
fn service_on_the_example_golden() {
    golden(
        "service-example.txt",
        &ok(explain(&["service", "shop/web", "-f", EXAMPLE]), &[]),
    );
}

#[test]
fn service_with_every_reason_golden() {
    let text = ok(
        explain(&["service", "demo/shop", "-f", DEMO]),
        &[DEMO_WARNING],
    );
    // The decisive reason of each Pod, by rule.
    for (pod, why) in [
        ("shop-done", "phase Succeeded"),
        ("shop-pending", "no IP yet"),
        ("shop-lost", "Node node-gone not found"),
        ("shop-v6", "no IPv4 address"),
        (
            "shop-noport",
            "which the Pod does not declare (it declares web:9090/TCP)",
        ),
        ("shop-typo", "not selected: label tier=\"wbe\""),
        ("shop-api", "not selected: no label tier"),
        ("shop-leaving", "being deleted"),
        ("shop-starting", "Ready condition not True"),
    ] {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{pod} ")))
            .unwrap_or_else(|| panic!("no line for {pod}:\n{text}"));
        assert!(line.contains(why), "{pod}: {line}");
    }
    assert!(text.contains("safeguard InsufficientNodeInfo"), "{text}");
    assert!(text.contains("Node node-c is ready"), "{text}");
    golden("service-demo.txt", &text);
}

#[test]
fn service_json_golden_and_yaml_say_the_same() {
    let json = ok(
        explain(&["service", "demo/shop", "-f", DEMO, "-o", "json"]),
        &[DEMO_WARNING],
    );
    let yaml = ok(
        explain(&["service", "demo/shop", "-f", DEMO, "-o", "yaml"]),
        &[DEMO_WARNING],
    );
    let from_json: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let from_yaml: serde_json::Value = serde_saphyr::from_str(&yaml).expect("YAML");
    assert_eq!(from_json, from_yaml);
    let lost = from_json["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .find(|p| p["pod"] == "shop-lost")
        .expect("shop-lost");
    assert_eq!(lost["endpointSlices"]["reason"]["code"], "NodeNotFound");
    assert_eq!(lost["endpoints"]["state"], "in");
    golden("service-demo.json", &json);
}

#[test]
fn pod_golden() {
    golden(
        "pod-example.txt",
        &ok(
            explain(&[
                "pod",
                "web-v2-85c6b4f9d7-9tf97",
                "-n",
                "shop",
                "-f",
                EXAMPLE,
            ]),
            &[],
        ),
    );
    let text = ok(
        explain(&["pod", "demo/shop-typo", "-f", DEMO]),
        &[DEMO_WARNING],
    );
    assert!(
        text.contains("demo/shop  no       out      not selected: label tier=\"wbe\""),
        "{text}"
    );
}

#[test]
fn ip_golden() {
    let text = ok(explain(&["ip", "10.96.30.7", "-f", DEMO]), &[DEMO_WARNING]);
    for holder in [
        "AllocationClaim  ip-10.96.30.7",
        "IPAddress        10.96.30.7",
        "Service          demo/shop",
    ] {
        assert!(text.contains(holder), "{holder}: {text}");
    }
    assert!(text.contains("provided IP is already allocated"), "{text}");
    golden("ip-demo.txt", &text);
    golden(
        "ip-example.yaml",
        &ok(
            explain(&["ip", "10.96.41.17", "-f", EXAMPLE, "-o", "yaml"]),
            &[],
        ),
    );
}

#[test]
fn nodeport_golden() {
    let text = ok(explain(&["nodeport", "30111", "-f", DEMO]), &[DEMO_WARNING]);
    assert!(text.contains("not bound to a stored Service"), "{text}");
    golden("nodeport-demo.txt", &text);
    let free = ok(explain(&["nodeport", "31999", "-f", EXAMPLE]), &[]);
    assert!(free.contains("held by:  nobody"), "{free}");
    assert!(free.contains("is admitted, with a warning"), "{free}");
}

/// `explain range`: each range's bands with their counts, from the flags on the demo
/// dump and from the ServiceCIDR objects of plan's dump (the one being deleted hands
/// out nothing).
#[test]
fn range_golden() {
    let text = ok(explain(&["range", "-f", DEMO]), &[DEMO_WARNING]);
    assert!(
        text.contains("ClusterIP ranges, from --service-cluster-ip-range:"),
        "{text}"
    );
    assert!(
        text.contains("NodePort range, from --service-node-port-range:"),
        "{text}"
    );
    golden("range-demo.txt", &text);
    let cidrs = ok(
        explain(&[
            "range",
            "-f",
            "tests/golden/inputs/service-cidrs.yaml",
            "-o",
            "json",
        ]),
        &[],
    );
    let doc: serde_json::Value = serde_json::from_str(&cidrs).expect("JSON");
    assert_eq!(doc["clusterIpSource"], "the cluster's ServiceCIDR objects");
    let ranges = doc["clusterIpRanges"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names: Vec<(&str, bool)> = ranges
        .iter()
        .map(|r| {
            (
                r["serviceCidrs"][0].as_str().unwrap_or_default(),
                r["handsOut"].as_bool().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(names, [("kubernetes", true), ("retiring", false)], "{doc}");
}

fn migrate(args: &[&str]) -> Run {
    let mut argv = vec!["migrate"];
    argv.extend_from_slice(args);
    run_bin(env!("CARGO_BIN_EXE_svcplane"), &argv, b"")
}

const MIGRATE_INPUT: &str = "tests/golden/migrate/cluster.yaml";

/// `svcplane migrate`: the plan of leaving the `kubernetes` ServiceCIDR for `new`,
/// as text (golden) and JSON; bad ranges exit 1 naming the flag.
#[test]
fn migrate_plan_golden() {
    let text = ok(
        migrate(&["--from", "kubernetes", "--to", "new", "-f", MIGRATE_INPUT]),
        &[],
    );
    assert!(
        text.contains("2 Service(s) to recreate, 7 left to you, 1 headless"),
        "{text}"
    );
    golden("../migrate/plan.txt", &text);
    let json = ok(
        migrate(&[
            "--from",
            "10.96.0.0/24",
            "--to",
            "new",
            "-f",
            MIGRATE_INPUT,
            "-o",
            "json",
        ]),
        &[],
    );
    let doc: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(doc["moves"][1]["service"], "shop/web");
    assert_eq!(doc["moves"][1]["nodePorts"], serde_json::json!([30080]));
    let e = migrate(&["--from", "old", "--to", "new", "-f", MIGRATE_INPUT]);
    assert_eq!(
        fails(&e, 1),
        format!(
            "error: --from \"old\": neither a CIDR nor the name of a ServiceCIDR in {MIGRATE_INPUT}\n"
        )
    );
    let usage = migrate(&["--to", "new", "-f", MIGRATE_INPUT]);
    assert!(fails(&usage, 2).contains("--from"), "{usage:#?}");
}

#[test]
fn range_flags_change_the_answer() {
    let text = ok(
        explain(&[
            "ip",
            "fd00:10:96::7a21",
            "-f",
            EXAMPLE,
            "--service-cluster-ip-range",
            "10.96.0.0/12,fd00:10:96::/112",
        ]),
        &[],
    );
    assert!(
        text.contains("range:    fd00:10:96::/112: dynamic band"),
        "{text}"
    );
    assert!(text.contains("provided IP is already allocated"), "{text}");
}

#[test]
fn stdin_is_read_with_dash() {
    let input = std::fs::read(root().join(EXAMPLE)).expect("example");
    let run = run_bin(
        env!("CARGO_BIN_EXE_svcplane"),
        &["explain", "service", "shop/web", "-f", "-"],
        &input,
    );
    assert_eq!(
        ok(run, &[]),
        ok(explain(&["service", "shop/web", "-f", EXAMPLE]), &[])
    );
}

// ------------------------------------------------------------ the kubectl plugin

#[test]
fn kubectl_plugin_binary_is_the_same_command() {
    let plugin = run_bin(
        env!("CARGO_BIN_EXE_kubectl-svcplane"),
        &["explain", "service", "shop/web", "-f", EXAMPLE],
        b"",
    );
    assert_eq!(
        ok(plugin, &[]),
        ok(explain(&["service", "shop/web", "-f", EXAMPLE]), &[])
    );
    let usage = run_bin(
        env!("CARGO_BIN_EXE_kubectl-svcplane"),
        &["explain", "service"],
        b"",
    );
    assert!(
        fails(&usage, 2).contains("Usage: kubectl svcplane explain service"),
        "{usage:#?}"
    );
}

// ------------------------------------------------------------ exit codes

#[test]
fn missing_objects_exit_1_naming_them() {
    let run = explain(&["service", "demo/nope", "-f", DEMO]);
    assert_eq!(
        fails(&run, 1).lines().collect::<Vec<_>>(),
        [
            DEMO_WARNING,
            "error: Service demo/nope not found in tests/golden/explain/inputs/demo.yaml"
        ]
    );
    let run = explain(&["pod", "nope", "-f", EXAMPLE]);
    assert_eq!(
        fails(&run, 1),
        "error: Pod default/nope not found in examples/cluster.yaml\n"
    );
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["service"][..],
        &["service", "a/b/c", "-f", EXAMPLE],
        &["service", "shop/web", "-f", EXAMPLE, "-o", "xml"],
        &["service", "shop/web", "-f", EXAMPLE, "--kubeconfig", "k"],
        &["ip", "10.0.0.256", "-f", EXAMPLE],
        &["nodeport", "0", "-f", EXAMPLE],
        &[
            "ip",
            "10.0.0.1",
            "-f",
            EXAMPLE,
            "--service-cluster-ip-range",
            "10.0.0.0/33",
        ],
        &["secret", "x"],
    ] {
        let run = explain(args);
        assert!(!fails(&run, 2).is_empty(), "{args:?}");
    }
}

#[test]
fn bad_input_exits_1_with_plans_error_line() {
    let run = explain(&[
        "service",
        "a/b",
        "-f",
        "tests/golden/explain/no-such-file.yaml",
    ]);
    let err = fails(&run, 1);
    assert!(
        err.starts_with("error: tests/golden/explain/no-such-file.yaml: cannot read:"),
        "{err}"
    );
}

#[test]
fn live_mode_with_an_unusable_kubeconfig_exits_1() {
    let run = explain(&[
        "service",
        "a/b",
        "--kubeconfig",
        "tests/golden/explain/no-such-kubeconfig",
    ]);
    let err = fails(&run, 1);
    assert!(
        err.contains("--kubeconfig tests/golden/explain/no-such-kubeconfig: cannot read"),
        "{err}"
    );
}
