//! Golden and error-path tests of `svcplane plan`, run on the real binary.
//!
//! Goldens live in `tests/golden/*.yaml|json`, inputs in `tests/golden/inputs/`.
//! After an intended change to the output, regenerate every golden with
//!
//!     UPDATE_GOLDEN=1 scripts/test --workspace --test plan_cli
//!
//! and review the diff (`git diff controller/tests/golden`).

// Helpers outside `#[test]` functions are test code too.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The package root; every path below is relative to it, so messages that
/// name files are stable.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `svcplane <args>` from the package root, feeding `stdin`.
fn svcplane(args: &[&str], stdin: &[u8]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_svcplane"))
        .args(args)
        .current_dir(root())
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn svcplane");
    let mut pipe = child.stdin.take().expect("stdin is piped");
    // A failed write only means the child stopped reading early.
    let _ = pipe.write_all(stdin);
    drop(pipe);
    let out = child.wait_with_output().expect("wait for svcplane");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    }
}

fn plan(args: &[&str]) -> Run {
    let mut argv = vec!["plan"];
    argv.extend_from_slice(args);
    svcplane(&argv, b"")
}

/// Splits stderr into the lines before the summary (warnings) and the summary
/// (`summary: ...` and its indented lines), which must come last.
fn split_stderr(stderr: &str) -> (Vec<&str>, Vec<&str>) {
    let lines: Vec<&str> = stderr.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("summary: "))
        .unwrap_or(lines.len());
    let (warnings, summary) = lines.split_at(at);
    assert!(
        summary.iter().skip(1).all(|l| l.starts_with("  ")),
        "the summary must be the last thing on stderr: {stderr}"
    );
    (warnings.to_vec(), summary.to_vec())
}

/// Asserts a successful run whose stderr is the summary alone, and that the
/// summary's totals match the document on stdout; returns stdout.
fn ok(run: Run) -> String {
    assert_eq!(run.code, Some(0), "expected success: {run:#?}");
    let (warnings, summary) = split_stderr(&run.stderr);
    assert!(
        warnings.is_empty(),
        "expected only the summary on stderr: {run:#?}"
    );
    let doc: serde_json::Value = serde_saphyr::from_str(&run.stdout).expect("stdout is the plan");
    let count = |key: &str| doc[key].as_array().map_or(0, Vec::len);
    let totals = summary.first().copied().unwrap_or_default();
    let writes = match count("actions") {
        0 => "no writes".to_owned(),
        1 => "1 write".to_owned(),
        n => format!("{n} writes"),
    };
    assert!(
        totals.starts_with(&format!("summary: {writes}, ")),
        "summary {totals:?} vs {} actions",
        count("actions")
    );
    let events = count("events");
    assert!(
        (events == 0 && totals.ends_with("no events"))
            || totals.contains(&format!(", {events} event")),
        "summary {totals:?} vs {events} events"
    );
    run.stdout
}

/// Asserts a failed run: exit `code`, nothing on stdout, and exactly the
/// stderr `lines`.
fn fails(run: Run, code: i32, lines: &[&str]) {
    assert_eq!(run.code, Some(code), "exit code: {run:#?}");
    assert_eq!(run.stdout, "", "stdout must be empty on error: {run:#?}");
    let got: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(got, lines, "stderr: {run:#?}");
}

/// Compares `actual` with `tests/golden/<name>`, or rewrites the golden when
/// `UPDATE_GOLDEN` is set.
fn golden(name: &str, actual: &str) {
    let path = root().join("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}\nregenerate with: UPDATE_GOLDEN=1 scripts/test --workspace --test plan_cli",
            path.display()
        )
    });
    if expected != actual {
        panic!(
            "output differs from {}:\n{}\nIf the change is intended, regenerate with:\n  \
             UPDATE_GOLDEN=1 scripts/test --workspace --test plan_cli",
            path.display(),
            diff(&expected, actual)
        );
    }
}

/// A short line diff: the first changed region with 3 lines of context
/// (common prefix and suffix trimmed), capped at 80 lines.
fn diff(expected: &str, actual: &str) -> String {
    let e: Vec<&str> = expected.lines().collect();
    let a: Vec<&str> = actual.lines().collect();
    let prefix = e.iter().zip(&a).take_while(|(x, y)| x == y).count();
    let suffix = e[prefix..]
        .iter()
        .rev()
        .zip(a[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let start = prefix.saturating_sub(3);
    let mut out = vec![format!(
        "@@ expected lines {}..{} vs actual lines {}..{} ({} vs {} lines in all) @@",
        prefix + 1,
        e.len() - suffix,
        prefix + 1,
        a.len() - suffix,
        e.len(),
        a.len()
    )];
    out.extend(e[start..prefix].iter().map(|l| format!("  {l}")));
    out.extend(e[prefix..e.len() - suffix].iter().map(|l| format!("- {l}")));
    out.extend(a[prefix..a.len() - suffix].iter().map(|l| format!("+ {l}")));
    let after = a.len() - suffix;
    out.extend(
        a[after..(after + 3).min(a.len())]
            .iter()
            .map(|l| format!("  {l}")),
    );
    if expected.ends_with('\n') != actual.ends_with('\n') {
        out.push("(trailing newline differs)".to_owned());
    }
    if out.len() > 80 {
        let more = out.len() - 80;
        out.truncate(80);
        out.push(format!("... {more} more diff lines"));
    }
    out.join("\n")
}

const EXAMPLE: &str = "examples/cluster.yaml";
const SMALL: &str = "tests/golden/inputs/small.yaml";

fn input(name: &str) -> String {
    format!("tests/golden/inputs/{name}")
}

fn read(path: &str) -> Vec<u8> {
    std::fs::read(root().join(path)).expect("read fixture")
}

// ---------------------------------------------------------------- goldens

/// AL-3: with ServiceCIDR objects in the input, the allocator's ranges
/// are theirs: a new Service gets an address of the ready one, a Service in the
/// terminating one is in range, one outside both is reported (by the repair loop);
/// with `--service-ranges-from=flags` the flag's range stands instead.
#[test]
fn service_cidr_objects_are_the_ranges() {
    let input = root().join("tests/golden/inputs/service-cidrs.yaml");
    let input = input.to_str().unwrap();
    golden(
        "service-cidrs.yaml",
        &ok(plan(&[
            "-f",
            input,
            "--controllers",
            "allocator,allocator-repair",
        ])),
    );
    let allocator_only = ok(plan(&["-f", input, "--controllers", "allocator"]));
    assert!(
        !allocator_only.contains("is not within"),
        "findings are the repair loop's: {allocator_only}"
    );
    let flags = ok(plan(&[
        "-f",
        input,
        "--controllers",
        "allocator,allocator-repair",
        "--service-cluster-ip-range",
        "10.96.0.0/16",
        "--service-ranges-from",
        "flags",
    ]));
    assert!(flags.contains("shop/kept"), "{flags}");
    assert!(flags.contains("10.101.0.20 is not within"), "{flags}");
}

/// AL-6.2: `plan --controllers servicecidr` plans the ServiceCIDR controller as `run`
/// does: the finalizer patched onto a ServiceCIDR without it, a deleted one held by an
/// IPAddress marked `Ready=False` (Terminating) by server-side apply of its status,
/// with `--now` as the transition time.
#[test]
fn service_cidr_controller_golden() {
    let input = root().join("tests/golden/inputs/service-cidrs.yaml");
    let out = ok(plan(&[
        "-f",
        input.to_str().unwrap(),
        "--controllers",
        "service-cidr-controller",
        "--now",
        "2026-11-29T08:00:00Z",
    ]));
    golden("service-cidr-controller.yaml", &out);
    let summary = plan(&[
        "-f",
        input.to_str().unwrap(),
        "--controllers",
        "servicecidr",
        "--now",
        "2026-11-29T08:00:00Z",
        "--summary",
    ]);
    assert_eq!(summary.code, Some(0), "{summary:#?}");
    let table = summary.stdout;
    assert!(
        table.contains("servicecidr: 1 patch ServiceCIDR, 1 apply ServiceCIDR"),
        "{table}"
    );
    let bad = plan(&["-f", input.to_str().unwrap(), "--now", "yesterday"]);
    assert_eq!(bad.code, Some(2), "{bad:#?}");
    assert!(
        bad.stderr.contains("--now") && bad.stderr.contains("\"yesterday\""),
        "{bad:#?}"
    );
}

#[test]
fn example_yaml_golden() {
    golden("example.yaml", &ok(plan(&["-f", EXAMPLE])));
}

#[test]
fn example_json_golden() {
    golden("example.json", &ok(plan(&["-f", EXAMPLE, "-o", "json"])));
}

#[test]
fn small_golden() {
    golden("small.yaml", &ok(plan(&["-f", SMALL])));
}

#[test]
fn events_golden() {
    golden(
        "missing-node.yaml",
        &ok(plan(&["-f", &input("missing-node.yaml")])),
    );
}

// ------------------------------------------------------- topology goldens

/// Topology inputs and goldens live in `tests/golden/topology/`.
const TOPOLOGY_CASES: [&str; 5] = [
    "balanced.yaml",
    "unbalanced.yaml",
    "too-few-endpoints.yaml",
    "node-missing-cpu.yaml",
    "traffic-distribution.yaml",
];

fn topology_golden(name: &str) {
    let input = format!("tests/golden/topology/inputs/{name}");
    golden(
        &format!("topology/{name}"),
        &ok(plan(&["-f", &input, "--controllers", "endpointslice"])),
    );
}

#[test]
fn topology_three_zones_balanced_golden() {
    topology_golden("balanced.yaml");
}

#[test]
fn topology_three_zones_unbalanced_golden() {
    topology_golden("unbalanced.yaml");
}

#[test]
fn topology_too_few_endpoints_golden() {
    topology_golden("too-few-endpoints.yaml");
}

#[test]
fn topology_node_missing_cpu_golden() {
    topology_golden("node-missing-cpu.yaml");
}

#[test]
fn topology_traffic_distribution_golden() {
    topology_golden("traffic-distribution.yaml");
}

#[test]
fn topology_events_name_the_address_type() {
    let doc: serde_json::Value = serde_json::from_str(&ok(plan(&[
        "-f",
        "tests/golden/topology/inputs/too-few-endpoints.yaml",
        "--controllers",
        "endpointslice",
        "-o",
        "json",
    ])))
    .expect("json");
    let events = doc["events"].as_array().expect("events");
    assert_eq!(events.len(), 1, "{doc:#}");
    assert_eq!(events[0]["reason"], "TopologyAwareHintsDisabled");
    assert_eq!(
        events[0]["message"],
        "Insufficient number of endpoints (2 endpoints, 3 zones), addressType: IPv4"
    );
}

#[test]
fn example_output_is_byte_stable() {
    let first = ok(plan(&["-f", EXAMPLE]));
    let second = ok(plan(&["-f", EXAMPLE]));
    assert!(
        first == second,
        "two runs differ:\n{}",
        diff(&first, &second)
    );
}

#[test]
fn yaml_and_json_output_carry_the_same_document() {
    let yaml = ok(plan(&["-f", EXAMPLE]));
    let json = ok(plan(&["-f", EXAMPLE, "-o", "json"]));
    let from_yaml: serde_json::Value = serde_saphyr::from_str(&yaml).expect("output is YAML");
    let from_json: serde_json::Value = serde_json::from_str(&json).expect("output is JSON");
    assert_eq!(from_yaml, from_json);
    assert!(from_json["actions"].is_array() && from_json["events"].is_array());
}

#[test]
fn actions_have_the_documented_shape() {
    let doc: serde_json::Value = serde_json::from_str(&ok(plan(&[
        "-f",
        EXAMPLE,
        "-o",
        "json",
        "--controllers",
        "endpointslice",
    ])))
    .expect("JSON");
    for action in doc["actions"].as_array().into_iter().flatten() {
        assert_eq!(action["controller"], "endpointslice");
        assert_eq!(action["kind"], "EndpointSlice");
        assert!(action["namespace"].is_string());
        match action["verb"].as_str() {
            Some("create") => {
                assert_eq!(action["object"]["apiVersion"], "discovery.k8s.io/v1");
                assert_eq!(action["object"]["kind"], "EndpointSlice");
                let generated = action["object"]["metadata"]["generateName"].is_string();
                assert_eq!(action.get("name").is_none(), generated, "{action}");
            }
            Some("update") => {
                assert!(action["name"].is_string());
                assert_eq!(action["object"]["metadata"]["name"], action["name"]);
            }
            Some("delete") => {
                assert!(action["name"].is_string());
                assert!(action.get("object").is_none());
            }
            other => panic!("unexpected verb {other:?}"),
        }
    }
}

// ----------------------------------------------------- input forms

#[test]
fn stdin_is_read_with_dash() {
    let run = svcplane(&["plan", "-f", "-"], &read(SMALL));
    assert_eq!(ok(run), ok(plan(&["-f", SMALL])));
}

#[test]
fn list_input_matches_multi_document_input() {
    assert_eq!(
        ok(plan(&["-f", &input("small-list.yaml")])),
        ok(plan(&["-f", SMALL]))
    );
}

#[test]
fn json_input_matches_yaml_input() {
    assert_eq!(
        ok(plan(&["-f", &input("small.json")])),
        ok(plan(&["-f", SMALL]))
    );
}

#[test]
fn several_files_are_one_snapshot_in_any_order() {
    assert_eq!(
        ok(plan(&[
            "-f",
            &input("small-part2.yaml"),
            "-f",
            &input("small-part1.yaml")
        ])),
        ok(plan(&["-f", SMALL]))
    );
    assert_eq!(
        ok(plan(&[
            "-f",
            &input("small-part1.yaml"),
            "-f",
            &input("small-part2.yaml")
        ])),
        ok(plan(&["-f", SMALL]))
    );
}

#[test]
fn empty_input_plans_nothing() {
    let run = svcplane(&["plan", "-f", "-"], b"---\n# nothing here\n---\n");
    assert_eq!(ok(run), "actions: []\nevents: []\n");
}

#[test]
fn skipped_kind_warns_once_and_plans_the_rest() {
    let run = plan(&["-f", &input("skipped-kind.yaml")]);
    assert_eq!(run.code, Some(0), "{run:#?}");
    let (warnings, summary) = split_stderr(&run.stderr);
    assert_eq!(
        warnings,
        [
            "warning: tests/golden/inputs/skipped-kind.yaml: document 1 (ConfigMap demo/settings): \
         kind not used by plan, skipped"
        ]
    );
    assert_eq!(summary.len(), 3, "totals and two controllers: {run:#?}");
    golden("skipped-kind.yaml", &run.stdout);
}

#[test]
fn max_endpoints_per_slice_is_passed_to_the_reconciler() {
    let doc: serde_json::Value = serde_json::from_str(&ok(plan(&[
        "-f",
        EXAMPLE,
        "--max-endpoints-per-slice",
        "1000",
        "-o",
        "json",
    ])))
    .expect("JSON");
    for action in doc["actions"].as_array().into_iter().flatten() {
        let n = action["object"]["endpoints"].as_array().map_or(0, Vec::len);
        assert!(n <= 1000);
    }
    let worker = |doc: &serde_json::Value| {
        doc["actions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["object"]["metadata"]["generateName"] == "worker-")
            .count()
    };
    let small: serde_json::Value = serde_json::from_str(&ok(plan(&[
        "-f",
        EXAMPLE,
        "--max-endpoints-per-slice",
        "50",
        "-o",
        "json",
    ])))
    .expect("JSON");
    assert!(
        worker(&small) >= worker(&doc),
        "a smaller maximum never means fewer worker slices"
    );
}

// ----------------------------------------------------------- bad input

#[test]
fn missing_file() {
    fails(
        plan(&["-f", SMALL, "-f", "tests/golden/inputs/no-such-file.yaml"]),
        1,
        &[
            "tests/golden/inputs/no-such-file.yaml: cannot read: No such file or directory (os error 2)",
        ],
    );
}

#[test]
fn invalid_yaml() {
    fails(
        plan(&["-f", &input("invalid.yaml")]),
        1,
        &[
            "tests/golden/inputs/invalid.yaml: document 2: unclosed bracket '[' at line 13, column 17",
        ],
    );
}

#[test]
fn invalid_json() {
    fails(
        plan(&["-f", &input("invalid.json")]),
        1,
        &["tests/golden/inputs/invalid.json: document 2: expected `,` or `}` at line 3 column 27"],
    );
}

#[test]
fn undecodable_object() {
    fails(
        plan(&["-f", &input("undecodable.yaml")]),
        1,
        &[
            "tests/golden/inputs/undecodable.yaml: document 1 (Pod demo/web-0): spec.containers: invalid type: string \"nginx\", expected a sequence",
        ],
    );
}

#[test]
fn object_without_kind() {
    fails(
        plan(&["-f", &input("no-kind.yaml")]),
        1,
        &["tests/golden/inputs/no-kind.yaml: document 3: object has no kind"],
    );
}

#[test]
fn object_without_api_version() {
    let run = svcplane(
        &["plan", "-f", "-"],
        b"kind: Service\nmetadata: {name: web, namespace: demo}\n",
    );
    fails(
        run,
        1,
        &["<stdin>: document 1 (Service demo/web): object has no apiVersion"],
    );
}

#[test]
fn stdin_errors_are_named_stdin() {
    let run = svcplane(
        &["plan", "-f", "-"],
        b"apiVersion: v1\nkind: Pod\nmetadata: [\n",
    );
    assert_eq!(run.code, Some(1), "{run:#?}");
    assert_eq!(run.stdout, "");
    assert!(run.stderr.starts_with("<stdin>: document 1: "), "{run:#?}");
    assert_eq!(run.stderr.lines().count(), 1, "{run:#?}");
}

#[test]
fn a_document_that_is_not_an_object() {
    fails(
        svcplane(&["plan", "-f", "-"], b"- just\n- a list\n"),
        1,
        &["<stdin>: document 1: expected an object, found a list"],
    );
}

/// clap's usage errors: exit 2, nothing on stdout, the first stderr line
/// names the flag and the value.
fn usage_error(args: &[&str], first_line: &str) {
    let run = plan(args);
    assert_eq!(run.code, Some(2), "{run:#?}");
    assert_eq!(run.stdout, "", "{run:#?}");
    assert_eq!(run.stderr.lines().next(), Some(first_line), "{run:#?}");
}

#[test]
fn max_endpoints_per_slice_out_of_range() {
    usage_error(
        &["-f", SMALL, "--max-endpoints-per-slice", "0"],
        "error: invalid value '0' for '--max-endpoints-per-slice <N>': 0 is not in 1..=1000",
    );
    usage_error(
        &["-f", SMALL, "--max-endpoints-per-slice", "1001"],
        "error: invalid value '1001' for '--max-endpoints-per-slice <N>': 1001 is not in 1..=1000",
    );
    usage_error(
        &["-f", SMALL, "--max-endpoints-per-slice", "abc"],
        "error: invalid value 'abc' for '--max-endpoints-per-slice <N>': invalid digit found in string",
    );
}

#[test]
fn unknown_controller() {
    let run = plan(&["-f", SMALL, "--controllers", "endpointslice,nodeipam"]);
    assert_eq!(run.code, Some(2), "{run:#?}");
    assert_eq!(run.stdout, "");
    assert_eq!(
        run.stderr.lines().next(),
        Some("error: invalid value 'nodeipam' for '--controllers <LIST>'"),
        "{run:#?}"
    );
    assert!(
        run.stderr.contains("[possible values: endpointslice"),
        "{run:#?}"
    );
}

#[test]
fn allocator_plans_the_missing_cluster_ip_and_node_ports() {
    let doc: serde_json::Value = serde_json::from_str(&ok(plan(&[
        "-f",
        EXAMPLE,
        "-o",
        "json",
        "--controllers",
        "allocator",
        "--service-cluster-ip-range",
        "10.96.0.0/12,fd00:10:96::/112",
    ])))
    .expect("JSON");
    let actions = doc["actions"].as_array().cloned().unwrap_or_default();
    assert_eq!(actions.len(), 1, "{doc}");
    let a = &actions[0];
    assert_eq!(
        (&a["controller"], &a["verb"], &a["kind"]),
        (&"allocator".into(), &"update".into(), &"Service".into())
    );
    assert_eq!(a["name"], "storefront");
    let spec = &a["object"]["spec"];
    let ip = spec["clusterIP"].as_str().unwrap_or_default();
    assert!(ip.starts_with("10.9") || ip.starts_with("10.10"), "{spec}");
    let node_port = spec["ports"][0]["nodePort"].as_i64().unwrap_or_default();
    assert!((30000..=32767).contains(&node_port), "{spec}");
    assert!(spec["healthCheckNodePort"].as_i64().is_some(), "{spec}");
    assert_eq!(
        doc["events"],
        serde_json::json!([]),
        "ranges match the cluster"
    );
}

#[test]
fn endpoint_slices_see_the_services_as_allocated() {
    // Without the allocator the unallocated storefront Service looks headless.
    let alone = ok(plan(&[
        "-f",
        EXAMPLE,
        "--controllers",
        "endpointslice",
        "-o",
        "json",
    ]));
    let with = ok(plan(&[
        "-f",
        EXAMPLE,
        "--controllers",
        "endpointslice,allocator",
        "-o",
        "json",
    ]));
    let count = |text: &str| {
        let doc: serde_json::Value = serde_json::from_str(text).expect("JSON");
        doc["actions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["object"]["metadata"]["generateName"] == "storefront-")
            .filter(|a| {
                a["object"]["metadata"]["labels"]["service.kubernetes.io/headless"].is_string()
            })
            .count()
    };
    assert!(count(&alone) > 0);
    assert_eq!(count(&with), 0);
}

#[test]
fn bad_allocator_flags_exit_2_naming_flag_and_value() {
    for (flag, value, message) in [
        (
            "--service-cluster-ip-range",
            "10.0.0.0/33",
            "invalid --service-cluster-ip-range value \"10.0.0.0/33\"",
        ),
        (
            "--service-node-port-range",
            "40000-30000",
            "invalid --service-node-port-range value \"40000-30000\"",
        ),
    ] {
        let run = plan(&["-f", SMALL, flag, value]);
        assert_eq!(run.code, Some(2), "{run:#?}");
        assert_eq!(run.stdout, "");
        assert!(run.stderr.contains(message), "{run:#?}");
    }
}

#[test]
fn unknown_output_format() {
    let run = plan(&["-f", SMALL, "-o", "xml"]);
    assert_eq!(run.code, Some(2), "{run:#?}");
    assert_eq!(run.stdout, "");
}

#[test]
fn files_are_required() {
    let run = plan(&[]);
    assert_eq!(run.code, Some(2), "{run:#?}");
    assert_eq!(run.stdout, "");
}

// ------------------------------------------------ summary, pipes, field paths

#[test]
fn the_summary_on_stderr_counts_writes_by_controller_verb_and_kind() {
    let run = plan(&["-f", EXAMPLE]);
    assert_eq!(run.code, Some(0), "{run:#?}");
    assert_eq!(
        run.stderr, EXAMPLE_SUMMARY,
        "the example's summary changed; if intended, update EXAMPLE_SUMMARY"
    );
}

/// What `plan -f examples/cluster.yaml` says on stderr.
const EXAMPLE_SUMMARY: &str = "\
summary: 14 writes, 1 event (Warning)
  endpointslice: 7 create EndpointSlice, 1 update EndpointSlice
  endpoints: 5 create Endpoints
  allocator: 1 update Service
";

#[test]
fn summary_flag_prints_a_table_instead_of_the_objects() {
    let run = plan(&["-f", EXAMPLE, "--summary"]);
    assert_eq!(run.code, Some(0), "{run:#?}");
    assert_eq!(run.stderr, "", "the table carries the summary: {run:#?}");
    golden("example.summary.txt", &run.stdout);
    assert!(run.stdout.ends_with(EXAMPLE_SUMMARY), "{}", run.stdout);
    let rows = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("endpoint") || l.starts_with("allocator"));
    assert_eq!(rows.count(), 14, "one row per write");
    // `--summary` replaces the document: it does not combine with -o.
    let both = plan(&["-f", EXAMPLE, "--summary", "-o", "json"]);
    assert_eq!(both.code, Some(2), "{both:#?}");
}

#[test]
fn a_closed_stdout_ends_quietly_with_exit_0() {
    // `svcplane plan ... | head -c 100`: the reader goes away long before the
    // output (120 KB of JSON, more than a pipe holds) is written.
    let mut child = Command::new(env!("CARGO_BIN_EXE_svcplane"))
        .args(["plan", "-f", EXAMPLE, "-o", "json"])
        .current_dir(root())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn svcplane");
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut head = [0u8; 100];
    std::io::Read::read_exact(&mut stdout, &mut head).expect("the first bytes");
    drop(stdout);
    let out = child.wait_with_output().expect("wait for svcplane");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.to_lowercase().contains("pipe"), "{stderr}");
    assert!(!stderr.contains("error"), "{stderr}");
}

#[test]
fn decode_errors_name_the_field_path() {
    let input = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\n\
                 spec:\n  ports:\n  - {name: http, port: eighty}\n";
    fails(
        svcplane(&["plan", "-f", "-"], input.as_bytes()),
        1,
        &[
            "<stdin>: document 1 (Service shop/web): spec.ports[0].port: invalid type: string \"eighty\", expected i32",
        ],
    );
}

#[test]
fn goldens_exist_for_every_golden_test() {
    for name in [
        "example.yaml",
        "example.json",
        "example.summary.txt",
        "small.yaml",
        "skipped-kind.yaml",
        "missing-node.yaml",
    ]
    .into_iter()
    .map(str::to_owned)
    .chain(TOPOLOGY_CASES.iter().map(|c| format!("topology/{c}")))
    {
        assert!(
            Path::new(&root().join("tests/golden").join(&name)).exists()
                || std::env::var_os("UPDATE_GOLDEN").is_some(),
            "missing golden {name}"
        );
    }
}
