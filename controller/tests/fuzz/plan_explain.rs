//! `svcplane plan` and `svcplane explain -f`, fuzzed in-process through their `run`
//! functions (what `main` calls, with the input on stdin).
//!
//! Contract: nothing panics; a bad input is an error, not an empty or partial plan;
//! an input error is `plan`'s one line `<stdin>: document N[ (Kind ns/name)]: reason`
//! with a reason, and when an object does not decode the reason starts with the path
//! of the field at fault (`spec.ports[0].port: invalid type: string "x", ...`), so a
//! user can find it in a 10 000-line dump; and a plan or explanation that succeeds
//! can always be rendered.

use std::sync::OnceLock;

use clap::Parser as _;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use serde_json::{Value, json};
use svcplane_controller::cli::{Cli, Command};
use svcplane_controller::dump::input::InputErrorKind;
use svcplane_controller::explain::{self, ExplainError};
use svcplane_controller::plan::{self, PlanError};

use crate::mutate::{self, Edit, Mutation};
use crate::runner;

/// The shipped example's objects (a `kind: List`), parsed once, plus the two kinds
/// only `explain` reads and a ServiceCIDR, which the example does not have.
fn objects() -> &'static [Value] {
    static OBJECTS: OnceLock<Vec<Value>> = OnceLock::new();
    OBJECTS.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../controller/examples/cluster.yaml");
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let list: Value =
            serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut items = list["items"].as_array().cloned().unwrap_or_default();
        assert!(items.len() > 100, "{path}: expected the example's objects");
        items.extend([
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "IPAddress",
                   "metadata": {"name": "10.96.41.17"},
                   "spec": {"parentRef": {"group": "", "resource": "services", "namespace": "shop", "name": "web"}}}),
            json!({"apiVersion": "svcplane.io/v1alpha1", "kind": "AllocationClaim",
                   "metadata": {"name": "nodeport-30080"},
                   "spec": {"kind": "NodePort", "value": "30080", "service": {"namespace": "shop", "name": "storefront"}}}),
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
                   "metadata": {"name": "kubernetes"},
                   "spec": {"cidrs": ["10.96.0.0/12", "fd00:10:96::/112"]}}),
        ]);
        items
    })
}

/// Fields of the objects the controllers read: hit often.
const TARGETS: &[&str] = &[
    "/apiVersion",
    "/kind",
    "/items",
    "/metadata",
    "/metadata/name",
    "/metadata/namespace",
    "/metadata/labels",
    "/metadata/labels/app.kubernetes.io~1name",
    "/metadata/labels/topology.kubernetes.io~1zone",
    "/metadata/labels/kubernetes.io~1service-name",
    "/metadata/labels/endpointslice.kubernetes.io~1managed-by",
    "/metadata/annotations",
    "/metadata/deletionTimestamp",
    "/metadata/creationTimestamp",
    "/metadata/ownerReferences",
    "/spec",
    "/spec/type",
    "/spec/selector",
    "/spec/clusterIP",
    "/spec/clusterIPs",
    "/spec/ipFamilies",
    "/spec/ipFamilyPolicy",
    "/spec/ports",
    "/spec/ports/0/port",
    "/spec/ports/0/targetPort",
    "/spec/ports/0/nodePort",
    "/spec/ports/0/protocol",
    "/spec/ports/0/name",
    "/spec/healthCheckNodePort",
    "/spec/externalTrafficPolicy",
    "/spec/publishNotReadyAddresses",
    "/spec/trafficDistribution",
    "/spec/nodeName",
    "/spec/hostname",
    "/spec/subdomain",
    "/spec/containers/0/ports/0/containerPort",
    "/spec/containers/0/ports/0/name",
    "/spec/podCIDRs",
    "/spec/cidrs",
    "/spec/parentRef",
    "/spec/kind",
    "/spec/value",
    "/spec/service",
    "/status/podIP",
    "/status/podIPs",
    "/status/phase",
    "/status/conditions/0/status",
    "/status/conditions/0/type",
    "/status/allocatable/cpu",
    "/addressType",
    "/endpoints",
    "/endpoints/0/addresses/0",
    "/endpoints/0/conditions/ready",
    "/endpoints/0/zone",
    "/endpoints/0/targetRef",
    "/ports/0/port",
    "/ports/0/name",
    "/subsets/0/addresses/0/ip",
    "/subsets/0/ports/0/port",
];

/// How the objects are laid out in the text.
#[derive(Debug, Clone, Copy)]
enum Layout {
    /// `---`-separated YAML documents.
    YamlDocuments,
    /// One YAML `kind: List`.
    YamlList,
    /// Concatenated JSON objects.
    JsonStream,
    /// One JSON `kind: List`.
    JsonList,
}

/// One input: some of the example's objects, mutated, laid out, then edited as text.
#[derive(Debug, Clone)]
struct Input {
    picks: Vec<Index>,
    mutations: Vec<(Index, Mutation)>,
    layout: Layout,
    edits: Vec<Edit>,
}

impl Input {
    fn objects(&self) -> Vec<Value> {
        let all = objects();
        // Pods are 114 of the example's 130 objects: the first pick is among the rest
        // (Services, slices, Nodes, ...), so most inputs give the controllers and
        // `explain` something to relate the Pods to.
        let others: Vec<&Value> = all.iter().filter(|o| o["kind"] != "Pod").collect();
        let mut picked: Vec<Value> = self
            .picks
            .iter()
            .enumerate()
            .map(|(n, i)| match n {
                0 => others[i.index(others.len())].clone(),
                _ => all[i.index(all.len())].clone(),
            })
            .collect();
        for (which, m) in &self.mutations {
            let n = picked.len();
            mutate::apply(
                &mut picked[which.index(n)],
                TARGETS,
                std::slice::from_ref(m),
            );
        }
        picked
    }

    fn text(&self) -> Vec<u8> {
        let objects = self.objects();
        let yaml = |v: &Value| serde_saphyr::to_string(v).unwrap_or_default();
        let text = match self.layout {
            Layout::YamlDocuments => objects
                .iter()
                .map(|o| format!("---\n{}", yaml(o)))
                .collect::<String>(),
            Layout::YamlList => {
                yaml(&json!({"apiVersion": "v1", "kind": "List", "items": objects}))
            }
            Layout::JsonStream => objects.iter().map(|o| format!("{o}\n")).collect(),
            Layout::JsonList => {
                json!({"apiVersion": "v1", "kind": "List", "items": objects}).to_string()
            }
        };
        mutate::apply_edits(text.into_bytes(), &self.edits)
    }
}

fn input() -> impl Strategy<Value = Input> {
    (
        prop::collection::vec(any::<Index>(), 1..8),
        prop::collection::vec((any::<Index>(), mutate::mutation(TARGETS.len(), 400)), 0..6),
        prop_oneof![
            Just(Layout::YamlDocuments),
            Just(Layout::YamlList),
            Just(Layout::JsonStream),
            Just(Layout::JsonList),
        ],
        // A text edit mostly makes the input unparsable, which the other target
        // covers: keep most inputs structural.
        prop::option::weighted(0.15, mutate::edit()).prop_map(Vec::from_iter),
    )
        .prop_map(|(picks, mutations, layout, edits)| Input {
            picks,
            mutations,
            layout,
            edits,
        })
}

/// The command lines run on each input (`-f -`: the input is stdin).
const PLANS: &[&[&str]] = &[
    &["plan", "-f", "-"],
    &["plan", "-f", "-", "-o", "json"],
    &["plan", "-f", "-", "--summary"],
    &[
        "plan",
        "-f",
        "-",
        "--service-cluster-ip-range",
        "10.96.0.0/12,fd00:10:96::/112",
        "--service-ranges-from",
        "flags",
    ],
];
const EXPLAINS: &[&[&str]] = &[
    &["explain", "service", "shop/web", "-f", "-"],
    &["explain", "service", "shop/api", "-f", "-", "-o", "json"],
    &[
        "explain",
        "service",
        "default/worker",
        "-f",
        "-",
        "-o",
        "yaml",
    ],
    &["explain", "pod", "shop/db-0", "-f", "-"],
    &["explain", "ip", "10.96.41.17", "-f", "-"],
    &["explain", "ip", "fd00:10:96::1", "-f", "-"],
    &["explain", "nodeport", "30080", "-f", "-"],
];

fn parse(argv: &[&str]) -> Command {
    let argv = std::iter::once("svcplane").chain(argv.iter().copied());
    match Cli::try_parse_from(argv) {
        Ok(cli) => cli.command,
        Err(e) => panic!("test command line: {e}"),
    }
}

/// Check an input error line: `<stdin>: ...`, one line, a reason, and a field path
/// when an object did not decode.
fn check_input_error(kind: &InputErrorKind, line: &str) -> Result<(), TestCaseError> {
    prop_assert!(
        line.starts_with("<stdin>: "),
        "error does not name the input: {line}"
    );
    prop_assert_eq!(line.lines().count(), 1, "not one line: {:?}", line);
    let reason = match kind {
        InputErrorKind::Source { reason, .. } => reason,
        InputErrorKind::Document { reason, .. } => reason,
        InputErrorKind::Object { reason, .. } => {
            // serde's own texts: the object did not decode, so say where.
            let decode = [
                "invalid type",
                "invalid value",
                "missing field",
                "unknown variant",
                "invalid length",
            ]
            .iter()
            .any(|t| reason.contains(t));
            // A member missing from the object itself has no path, but serde's text
            // names it (`missing field `spec``).
            if decode && !reason.starts_with("missing field `") {
                let path = reason.split(": ").next().unwrap_or_default();
                prop_assert!(
                    !path.is_empty() && !path.contains(' ') && !path.starts_with("invalid"),
                    "decode error without the field's path: {line}"
                );
            }
            reason
        }
    };
    prop_assert!(!reason.trim().is_empty(), "no reason: {line}");
    Ok(())
}

/// The failure with the input text: the strategy's values (indices into the example)
/// say little on their own.
fn with_input(e: TestCaseError, text: &[u8]) -> TestCaseError {
    const SHOWN: usize = 4_000;
    let shown = String::from_utf8_lossy(&text[..text.len().min(SHOWN)]);
    TestCaseError::fail(format!("{e}\ninput ({} bytes):\n{shown}", text.len()))
}

fn run_plan(argv: &[&str], text: &[u8]) -> Result<(), TestCaseError> {
    let Command::Plan(args) = parse(argv) else {
        panic!("not a plan command line: {argv:?}")
    };
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    match plan::run(&args, &mut &text[..], &mut stdout, &mut stderr) {
        Ok(()) => {
            prop_assert!(!stdout.is_empty(), "a plan printed nothing");
            if argv.contains(&"json") {
                let out: Result<Value, _> = serde_json::from_slice(&stdout);
                prop_assert!(
                    out.is_ok(),
                    "plan -o json printed invalid JSON: {:?}",
                    out.err()
                );
            }
        }
        Err(PlanError::Input(e)) => {
            prop_assert!(stdout.is_empty(), "a bad input printed a plan");
            check_input_error(e.kind(), &e.to_string())?;
        }
        Err(e) => prop_assert!(false, "plan failed on its own: {e}"),
    }
    Ok(())
}

fn run_explain(argv: &[&str], text: &[u8]) -> Result<(), TestCaseError> {
    let Command::Explain(args) = parse(argv) else {
        panic!("not an explain command line: {argv:?}")
    };
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    match explain::run(&args, &mut &text[..], &mut stdout, &mut stderr) {
        Ok(()) => prop_assert!(!stdout.is_empty(), "an explanation printed nothing"),
        Err(ExplainError::Input(e)) => check_input_error(e.kind(), &e.to_string())?,
        // The input is fine, it just lacks the object or usable ranges: said so.
        Err(e @ (ExplainError::NotFound { .. } | ExplainError::Ranges(_))) => {
            prop_assert!(!e.to_string().trim().is_empty());
        }
        Err(e) => prop_assert!(false, "explain failed on its own: {e}"),
    }
    Ok(())
}

#[test]
fn plan_and_explain_read_mutated_cluster_dumps_without_panics_and_name_bad_fields() {
    runner::run(
        "plan/explain: mutated cluster dumps",
        1_500,
        (input(), any::<Index>(), any::<Index>()),
        |(input, p, e)| {
            let text = input.text();
            run_plan(PLANS[p.index(PLANS.len())], &text)
                .and_then(|()| run_explain(EXPLAINS[e.index(EXPLAINS.len())], &text))
                .map_err(|e| with_input(e, &text))
        },
    );
}

/// Text that is not a dump: random bytes, printable noise made of YAML's and JSON's
/// syntax, and random JSON.
fn noise() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512),
        "[ -~\t\n]{0,300}".prop_map(String::into_bytes),
        "([a-zA-Z0-9]{0,6}|[:\\-\\[\\]{},#&*!|>'\"%@`?~ ]|\n {0,4}){0,120}".prop_map(String::into_bytes),
        mutate::any_json().prop_map(|v| v.to_string().into_bytes()),
        (mutate::any_json(), prop::sample::select(vec!["v1", "discovery.k8s.io/v1"]),
         prop::sample::select(vec!["Service", "Pod", "Node", "EndpointSlice", "Endpoints", "List", "PodList", "IPAddress", "AllocationClaim", "ServiceCIDR"]))
            .prop_map(|(body, api, kind)| {
                let mut v = json!({"apiVersion": api, "kind": kind, "metadata": {"name": "x", "namespace": "y"}});
                if let (Value::Object(extra), Some(m)) = (body, v.as_object_mut()) {
                    m.extend(extra);
                }
                v.to_string().into_bytes()
            }),
    ]
}

#[test]
fn plan_and_explain_reject_arbitrary_bytes_with_a_one_line_error() {
    runner::run(
        "plan/explain: arbitrary bytes",
        4_000,
        (noise(), any::<Index>(), any::<Index>()),
        |(text, p, e)| {
            run_plan(PLANS[p.index(PLANS.len())], &text)
                .and_then(|()| run_explain(EXPLAINS[e.index(EXPLAINS.len())], &text))
                .map_err(|e| with_input(e, &text))
        },
    );
}
