//! The webhook's request path, fuzzed: `Webhook::handle`, the function the HTTPS
//! server hands every body to (decode, review, claim, answer), over a real allocation
//! state and an in-memory claim store.
//!
//! The contract checked on every answer (docs/webhook.md):
//! - nothing panics (a panic on the server's task is a 500 and a lost answer);
//! - an HTTP status other than 200 is a 4xx with a `{"error": "..."}` body naming the
//!   problem (WH-10.1): a malformed body is the caller's fault, never a 5xx;
//! - a 200 is an AdmissionReview echoing `request.uid` (WH-10.2); a refusal carries a
//!   4xx `Status` with a message, or one of the 500s kube-apiserver itself answers for
//!   the same input (WH-9: an exhausted range, a requested healthCheckNodePort it
//!   cannot take, a duplicate nodePort on update);
//! - an allowed mutation's patch is a JSON Patch that applies to `request.object`, and
//!   the validating endpoint never patches.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{Value, json};
use svcplane_allocator::{AllocatorConfig, Claim};
use svcplane_webhook::claim::AllocationClaim;
use svcplane_webhook::handler::{AdmissionHandler, Answer, Endpoint};
use svcplane_webhook::server::DEFAULT_REQUEST_TIMEOUT;
use svcplane_webhook::shell::holders::SourceKind;
use svcplane_webhook::shell::watch::Readiness;
use svcplane_webhook::shell::{ClaimError, ClaimStore, Claimed, Webhook};
use svcplane_webhook::state::{AllocationState, HolderKey, ServiceRef};

use crate::mutate::{self, Edit, Mutation};
use crate::runner;

/// Claims in memory, create-if-absent by name: one winner per value, as the API
/// server's AlreadyExists gives.
#[derive(Default)]
struct MemoryClaims(Mutex<Vec<AllocationClaim>>);

impl ClaimStore for MemoryClaims {
    async fn claim(&self, claim: AllocationClaim) -> Result<Claimed, ClaimError> {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(held) = all.iter().find(|c| c.metadata.name == claim.metadata.name) {
            return Ok(Claimed::Taken(Box::new(held.clone())));
        }
        all.push(claim.clone());
        Ok(Claimed::Won(Box::new(claim)))
    }

    async fn release(&self, claim: &AllocationClaim) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|c| c.metadata.name != claim.metadata.name);
    }
}

/// The cluster shapes a case runs against: single-stack IPv4, dual-stack, IPv6 first.
const RANGES: &[&str] = &[
    "10.96.0.0/24",
    "10.96.0.0/24,fd00:10:96::/120",
    "fd00:10:96::/120,10.96.0.0/24",
];

/// A fresh webhook (each case starts from the same state, so a failure replays) in which
/// another Service already holds 10.96.0.50 and NodePort 30010, the values the
/// mutations like to ask for.
fn webhook(ranges: &str) -> Webhook<MemoryClaims> {
    let allocators = AllocatorConfig::from_flags(ranges, "30000-30099")
        .map_err(|e| e.to_string())
        .and_then(|c| c.allocators(7))
        .unwrap_or_else(|e| panic!("test ranges {ranges}: {e}"));
    let mut state = AllocationState::new(allocators);
    let held: IpAddr = [10, 96, 0, 50].into();
    state.set(
        HolderKey::Service {
            namespace: "shop".into(),
            name: "db".into(),
        },
        Some(ServiceRef::named("shop", "db")),
        vec![Claim::Ip(held), Claim::NodePort(30010)],
    );
    let readiness = Arc::new(Readiness::default());
    for kind in [
        SourceKind::Services,
        SourceKind::Claims,
        SourceKind::IpAddresses,
    ] {
        readiness.listed(kind);
    }
    Webhook::new(
        Arc::new(Mutex::new(state)),
        MemoryClaims::default(),
        readiness,
        Default::default(),
    )
    .with_identity("fuzz")
}

/// The Services the structured target starts from, as the API server sends them after
/// defaulting (WH-10.4): one per allocation path.
fn service(shape: usize) -> Value {
    let meta = json!({"name": "web", "namespace": "shop", "labels": {"app": "web"}});
    let spec = match shape {
        0 => {
            json!({"type": "ClusterIP", "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
                    "selector": {"app": "web"}, "sessionAffinity": "None", "internalTrafficPolicy": "Cluster"})
        }
        1 => json!({"type": "NodePort", "externalTrafficPolicy": "Cluster",
                    "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                              {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30005}],
                    "selector": {"app": "web"}}),
        2 => json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local",
                    "ports": [{"port": 443, "protocol": "TCP", "targetPort": "https"}],
                    "selector": {"app": "web"}, "allocateLoadBalancerNodePorts": true}),
        3 => json!({"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"],
                    "ports": [{"port": 5432, "protocol": "TCP"}], "selector": {"app": "db"}}),
        4 => {
            json!({"type": "ClusterIP", "ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv4", "IPv6"],
                    "clusterIPs": ["10.96.0.20", "fd00:10:96::20"], "clusterIP": "10.96.0.20",
                    "ports": [{"port": 80, "protocol": "TCP"}]})
        }
        5 => json!({"type": "ExternalName", "externalName": "db.example.com"}),
        _ => json!({"type": "ClusterIP", "ports": [{"port": 80, "protocol": "TCP"}]}),
    };
    let mut svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec});
    if shape == 6 {
        // The install check's dry-run probe: generateName, no name (WH-13.3).
        svc["metadata"] = json!({"generateName": "svcplane-check-", "namespace": "shop",
                                 "labels": {"svcplane.io/probe": ""}});
    }
    svc
}

/// The same Service as stored: what an UPDATE's `oldObject` carries.
fn stored(mut svc: Value) -> Value {
    let node_ports = matches!(spec_type(&svc), "NodePort" | "LoadBalancer");
    let spec = &mut svc["spec"];
    if spec["type"] != "ExternalName" && spec.get("clusterIP").is_none() {
        spec["clusterIP"] = json!("10.96.0.30");
        spec["clusterIPs"] = json!(["10.96.0.30"]);
        spec["ipFamilies"] = json!(["IPv4"]);
        spec["ipFamilyPolicy"] = json!("SingleStack");
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut)
        && node_ports
    {
        for (i, p) in ports.iter_mut().enumerate() {
            p.as_object_mut()
                .map(|p| p.entry("nodePort").or_insert(json!(30020 + i)));
        }
    }
    if svc["spec"]["externalTrafficPolicy"] == "Local" {
        svc["spec"]["healthCheckNodePort"] = json!(30030);
    }
    svc["metadata"]["uid"] = json!("0b4a7a4e-0000-4000-8000-000000000001");
    svc
}

fn spec_type(svc: &Value) -> &str {
    svc["spec"]["type"].as_str().unwrap_or_default()
}

/// A valid AdmissionReview of `object` (an UPDATE when `old` is given).
fn review(object: &Value, old: Option<&Value>, dry_run: bool) -> Value {
    let gvk = json!({"group": "", "version": "v1", "kind": "Service"});
    let gvr = json!({"group": "", "version": "v1", "resource": "services"});
    let mut request = json!({
        "uid": "7f0c1d2e-0000-4000-8000-00000000abcd",
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": object["metadata"]["name"].as_str().unwrap_or_default(),
        "namespace": "shop",
        "operation": if old.is_some() { "UPDATE" } else { "CREATE" },
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": object,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    });
    if let Some(old) = old {
        request["oldObject"] = old.clone();
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// Every starting review: each shape as CREATE and as UPDATE (with the object as the
/// client sent it and as already allocated), real and dry run.
fn base_review(shape: usize, update: u8, dry_run: bool) -> Value {
    let svc = service(shape);
    match update {
        0 => review(&svc, None, dry_run),
        1 => review(&svc, Some(&stored(svc.clone())), dry_run),
        _ => {
            let old = stored(svc);
            review(&old, Some(&old), dry_run)
        }
    }
}

/// The fields the decoder and the review read: hit often.
const TARGETS: &[&str] = &[
    "/apiVersion",
    "/kind",
    "/request",
    "/request/uid",
    "/request/operation",
    "/request/dryRun",
    "/request/name",
    "/request/namespace",
    "/request/subResource",
    "/request/resource/resource",
    "/request/resource/group",
    "/request/object",
    "/request/oldObject",
    "/request/object/metadata/name",
    "/request/object/metadata/namespace",
    "/request/object/metadata/generateName",
    "/request/object/metadata/uid",
    "/request/object/metadata/labels",
    "/request/object/metadata/labels/svcplane.io~1probe",
    "/request/object/metadata/annotations",
    "/request/object/spec",
    "/request/object/spec/type",
    "/request/object/spec/clusterIP",
    "/request/object/spec/clusterIPs",
    "/request/object/spec/clusterIPs/0",
    "/request/object/spec/clusterIPs/1",
    "/request/object/spec/clusterIPs/2",
    "/request/object/spec/ipFamilies",
    "/request/object/spec/ipFamilies/0",
    "/request/object/spec/ipFamilies/1",
    "/request/object/spec/ipFamilyPolicy",
    "/request/object/spec/ports",
    "/request/object/spec/ports/0",
    "/request/object/spec/ports/0/port",
    "/request/object/spec/ports/0/nodePort",
    "/request/object/spec/ports/0/protocol",
    "/request/object/spec/ports/0/name",
    "/request/object/spec/ports/0/targetPort",
    "/request/object/spec/ports/1/nodePort",
    "/request/object/spec/ports/1/port",
    "/request/object/spec/healthCheckNodePort",
    "/request/object/spec/externalTrafficPolicy",
    "/request/object/spec/internalTrafficPolicy",
    "/request/object/spec/allocateLoadBalancerNodePorts",
    "/request/object/spec/loadBalancerClass",
    "/request/object/spec/externalName",
    "/request/object/spec/selector",
    "/request/object/spec/sessionAffinity",
    "/request/object/spec/sessionAffinityConfig",
    "/request/object/spec/externalIPs",
    "/request/object/status",
    "/request/oldObject/spec/type",
    "/request/oldObject/spec/clusterIP",
    "/request/oldObject/spec/clusterIPs",
    "/request/oldObject/spec/ipFamilies",
    "/request/oldObject/spec/ipFamilyPolicy",
    "/request/oldObject/spec/ports/0/nodePort",
    "/request/oldObject/spec/healthCheckNodePort",
];

/// The 500s kube-apiserver answers for the same input, which the webhook mirrors
/// (WH-9, allocator.md AL-5/AL-7): not faults of the webhook.
fn upstream_500(message: &str) -> bool {
    message.contains("range is full")
        || message.starts_with(
            "Internal error occurred: failed to allocate requested HealthCheck NodePort",
        )
        || message.starts_with("duplicate nodePort: ")
}

/// Check one answer to `body` posted to `endpoint` against the contract above.
fn check_answer(endpoint: Endpoint, body: &[u8], answer: &Answer) -> Result<(), TestCaseError> {
    let text = String::from_utf8_lossy(&answer.body);
    let out: Value = serde_json::from_slice(&answer.body)
        .map_err(|e| TestCaseError::fail(format!("answer body is not JSON ({e}): {text}")))?;
    if answer.status != 200 {
        prop_assert!(
            (400..500).contains(&answer.status),
            "HTTP {} for a client-side problem: {text}",
            answer.status
        );
        let message = out["error"].as_str().unwrap_or_default();
        prop_assert!(!message.trim().is_empty(), "4xx without a message: {text}");
        return Ok(());
    }
    prop_assert_eq!(&out["apiVersion"], "admission.k8s.io/v1", "{}", text);
    prop_assert_eq!(&out["kind"], "AdmissionReview", "{}", text);
    let response = &out["response"];
    // A 200 means the body decoded, so the request and its uid are there to compare.
    let input: Value = serde_json::from_slice(body)
        .map_err(|e| TestCaseError::fail(format!("200 for a body that is not JSON: {e}")))?;
    prop_assert_eq!(&response["uid"], &input["request"]["uid"], "uid not echoed");
    match response["allowed"].as_bool() {
        Some(false) => {
            let status = &response["status"];
            let code = status["code"].as_u64().unwrap_or_default();
            let message = status["message"].as_str().unwrap_or_default();
            prop_assert!(
                !message.trim().is_empty(),
                "denial without a message: {text}"
            );
            prop_assert!(
                (400..500).contains(&code) || (code == 500 && upstream_500(message)),
                "denied with code {code}: {message}"
            );
            prop_assert!(
                response.get("patch").is_none(),
                "a denial with a patch: {text}"
            );
        }
        Some(true) => {
            let Some(patch) = response.get("patch") else {
                return Ok(());
            };
            prop_assert!(
                endpoint == Endpoint::Mutate,
                "the validating endpoint patched: {text}"
            );
            prop_assert_eq!(&response["patchType"], "JSONPatch");
            let raw = STANDARD
                .decode(patch.as_str().unwrap_or_default())
                .map_err(|e| TestCaseError::fail(format!("patch is not base64: {e}")))?;
            let ops: json_patch::Patch = serde_json::from_slice(&raw)
                .map_err(|e| TestCaseError::fail(format!("patch is not a JSON Patch: {e}")))?;
            prop_assert!(!ops.0.is_empty(), "an empty patch was sent");
            let mut object = input["request"]["object"].clone();
            json_patch::patch(&mut object, &ops.0).map_err(|e| {
                TestCaseError::fail(format!(
                    "patch {} does not apply to the object: {e}",
                    String::from_utf8_lossy(&raw)
                ))
            })?;
        }
        None => prop_assert!(false, "no response.allowed: {text}"),
    }
    Ok(())
}

/// Post `body` to `endpoint` of a fresh webhook over `ranges` and check the answer.
fn post(ranges: &str, endpoint: Endpoint, body: Vec<u8>) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| TestCaseError::fail(format!("runtime: {e}")))?;
    let started = std::time::Instant::now();
    let answer = runtime.block_on(webhook(ranges).handle(endpoint, Bytes::from(body.clone())));
    let took = started.elapsed();
    // Past the server's deadline the API server gets a 504 instead of the answer (and
    // the handler keeps burning CPU): a slow answer breaks the contract too.
    prop_assert!(
        took < DEFAULT_REQUEST_TIMEOUT,
        "answered in {took:?}, past the {DEFAULT_REQUEST_TIMEOUT:?} deadline"
    );
    check_answer(endpoint, &body, &answer)
}

/// Mostly the mutating endpoint: it does more with the body (allocates, patches).
fn endpoint() -> impl Strategy<Value = Endpoint> {
    prop_oneof![3 => Just(Endpoint::Mutate), 1 => Just(Endpoint::Validate)]
}

/// Bodies from outside the contract: random bytes, random JSON, a well-formed envelope
/// around a random request, and byte-level edits of a valid review.
fn unstructured_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        mutate::any_json().prop_map(|v| v.to_string().into_bytes()),
        mutate::any_json().prop_map(|request| {
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
                .to_string()
                .into_bytes()
        }),
        (
            0usize..7,
            0u8..3,
            any::<bool>(),
            prop::collection::vec(mutate::edit(), 1..6)
        )
            .prop_map(|(shape, update, dry_run, edits)| {
                let valid = base_review(shape, update, dry_run).to_string().into_bytes();
                mutate::apply_edits(valid, &edits)
            }),
    ]
}

#[test]
fn admission_answers_any_bytes_with_a_4xx_or_a_well_formed_review() {
    runner::run(
        "admission: arbitrary bodies",
        20_000,
        (
            prop::sample::select(RANGES),
            endpoint(),
            unstructured_body(),
        ),
        |(ranges, endpoint, body)| post(ranges, endpoint, body),
    );
}

/// A valid review with mutations applied, as bytes.
#[derive(Debug, Clone)]
struct Mutated {
    shape: usize,
    update: u8,
    dry_run: bool,
    mutations: Vec<Mutation>,
    edits: Vec<Edit>,
}

impl Mutated {
    fn body(&self) -> Vec<u8> {
        let mut doc = base_review(self.shape, self.update, self.dry_run);
        mutate::apply(&mut doc, TARGETS, &self.mutations);
        mutate::apply_edits(doc.to_string().into_bytes(), &self.edits)
    }
}

fn mutated() -> impl Strategy<Value = Mutated> {
    (
        0usize..7,
        0u8..3,
        prop::bool::weighted(0.2),
        prop::collection::vec(mutate::mutation(TARGETS.len(), 3_000), 1..5),
        // Mostly structure only: a text edit mostly makes the body unparsable, which
        // the other target covers.
        prop::option::weighted(0.1, mutate::edit()).prop_map(Vec::from_iter),
    )
        .prop_map(|(shape, update, dry_run, mutations, edits)| Mutated {
            shape,
            update,
            dry_run,
            mutations,
            edits,
        })
}

#[test]
fn admission_answers_mutated_service_reviews_within_the_contract() {
    runner::run(
        "admission: mutated Service reviews",
        10_000,
        (prop::sample::select(RANGES), endpoint(), mutated()),
        |(ranges, endpoint, m)| post(ranges, endpoint, m.body()),
    );
}

#[test]
fn every_starting_review_is_admitted_unmutated() {
    // The mutations only find something if the reviews they start from are good ones.
    for shape in 0..7 {
        for update in 0..3 {
            for dry_run in [false, true] {
                let body = base_review(shape, update, dry_run).to_string().into_bytes();
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap_or_else(|e| panic!("runtime: {e}"));
                let answer = runtime.block_on(
                    webhook(RANGES[1]).handle(Endpoint::Mutate, Bytes::from(body.clone())),
                );
                let out: Value = serde_json::from_slice(&answer.body).unwrap_or_default();
                assert_eq!(
                    out["response"]["allowed"], true,
                    "shape {shape} update {update} dry_run {dry_run}: {out}"
                );
                if let Err(e) = check_answer(Endpoint::Mutate, &body, &answer) {
                    panic!("shape {shape} update {update}: {e}");
                }
            }
        }
    }
}
