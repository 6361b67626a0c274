use rstest::rstest;
use serde_json::{Value, json};

use super::{cluster_ip_spec, review_json, svc};
use crate::handler::MAX_BODY_BYTES;
use crate::review::decode::{Decoded, Operation, decode};

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

fn good() -> Value {
    review_json("CREATE", "u1", &svc("web", cluster_ip_spec()), None, false)
}

fn bad(body: &[u8]) -> (u16, String) {
    let e = decode(body).unwrap_err();
    (e.status, e.message)
}

/// `v` with the member at `pointer` set (inserted if missing).
fn with(mut v: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    match v.pointer_mut(parent).unwrap() {
        Value::Object(m) => {
            m.insert(key.to_string(), value);
        }
        Value::Array(a) => a[key.parse::<usize>().unwrap()] = value,
        other => panic!("cannot index {other}"),
    }
    v
}

fn without(mut v: Value, parent: &str, key: &str) -> Value {
    v.pointer_mut(parent)
        .unwrap()
        .as_object_mut()
        .unwrap()
        .remove(key);
    v
}

#[test]
fn create_decodes_with_raw_object_kept() {
    let review = good();
    let Decoded::Service(r) = decode(&bytes(&review)).unwrap() else {
        panic!("passthrough")
    };
    assert_eq!(r.uid, "u1");
    assert_eq!(r.operation, Operation::Create);
    assert!(!r.dry_run);
    assert_eq!((r.namespace.as_str(), r.name.as_str()), ("ns", "web"));
    assert_eq!(r.object, review["request"]["object"]);
    assert_eq!(r.service.metadata.name.as_deref(), Some("web"));
    assert!(r.old_service.is_none());
}

#[test]
fn update_decodes_old_object_and_dry_run() {
    let obj = svc("web", cluster_ip_spec());
    let review = review_json("UPDATE", "u2", &obj, Some(&obj), true);
    let Decoded::Service(r) = decode(&bytes(&review)).unwrap() else {
        panic!("passthrough")
    };
    assert_eq!(r.operation, Operation::Update);
    assert!(r.dry_run);
    assert!(r.old_service.is_some());
}

#[test]
fn generate_name_create_has_empty_name_and_prefix_identity() {
    let mut obj = svc("", cluster_ip_spec());
    obj["metadata"] = json!({"generateName": "web-", "namespace": "ns"});
    let review = review_json("CREATE", "u3", &obj, None, false);
    let Decoded::Service(r) = decode(&bytes(&review)).unwrap() else {
        panic!("passthrough")
    };
    assert_eq!(r.name, "");
    let me = r.service_ref();
    assert_eq!(
        (me.generate_name.as_str(), me.request_uid.as_str()),
        ("web-", "u3")
    );
}

#[test]
fn name_and_namespace_fall_back_to_the_object() {
    let review = with(good(), "/request/name", json!(""));
    let review = with(review, "/request/namespace", json!(""));
    let Decoded::Service(r) = decode(&bytes(&review)).unwrap() else {
        panic!("passthrough")
    };
    assert_eq!((r.namespace.as_str(), r.name.as_str()), ("ns", "web"));
}

#[test]
fn oversized_body_is_413() {
    let body = vec![b' '; MAX_BODY_BYTES + 1];
    let (status, msg) = bad(&body);
    assert_eq!(status, 413);
    assert!(msg.contains(&MAX_BODY_BYTES.to_string()), "{msg}");
}

#[rstest]
#[case::not_json(b"{\"apiVersion\": nope}".to_vec(), "AdmissionReview body is not valid JSON: expected ident at line 1 column 17")]
#[case::truncated(b"{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\"".to_vec(), "truncated AdmissionReview body: EOF while parsing an object at line 1 column 44")]
#[case::empty(
    Vec::new(),
    "truncated AdmissionReview body: EOF while parsing a value at line 1 column 0"
)]
#[case::not_object(b"[1]".to_vec(), "AdmissionReview body must be a JSON object, got an array")]
#[case::wrong_api_version(bytes(&with(good(), "/apiVersion", json!("admission.k8s.io/v1beta1"))), "apiVersion must be \"admission.k8s.io/v1\", got \"admission.k8s.io/v1beta1\"")]
#[case::missing_api_version(bytes(&without(good(), "", "apiVersion")), "apiVersion must be \"admission.k8s.io/v1\", got nothing")]
#[case::wrong_kind(bytes(&with(good(), "/kind", json!("AdmissionResponse"))), "kind must be \"AdmissionReview\", got \"AdmissionResponse\"")]
#[case::missing_request(bytes(&without(good(), "", "request")), "AdmissionReview has no request")]
#[case::null_request(bytes(&with(good(), "/request", Value::Null)), "AdmissionReview has no request")]
#[case::request_not_object(bytes(&with(good(), "/request", json!("x"))), "request must be a JSON object, got a string")]
#[case::missing_uid(bytes(&without(good(), "/request", "uid")), "request.uid is missing")]
#[case::empty_uid(bytes(&with(good(), "/request/uid", json!(""))), "request.uid is empty")]
#[case::uid_not_string(bytes(&with(good(), "/request/uid", json!(7))), "request.uid must be a string, got a number")]
#[case::null_object(bytes(&with(good(), "/request/object", Value::Null)), "request.object must be a JSON object on CREATE, got null")]
#[case::missing_object(bytes(&without(good(), "/request", "object")), "request.object must be a JSON object on CREATE, got nothing")]
#[case::array_object(bytes(&with(good(), "/request/object", json!([]))), "request.object must be a JSON object on CREATE, got an array")]
#[case::missing_old_object(bytes(&with(good(), "/request/operation", json!("UPDATE"))), "request.oldObject must be a JSON object on UPDATE, got nothing")]
#[case::dry_run_not_bool(bytes(&with(good(), "/request/dryRun", json!("yes"))), "request.dryRun must be a boolean, got a string")]
#[case::node_port_string(bytes(&with(good(), "/request/object/spec/ports/0/nodePort", json!("30001"))), "request.object is not a valid Service at spec.ports[0].nodePort: invalid type: string \"30001\", expected i32")]
#[case::port_not_a_number(bytes(&with(good(), "/request/object/spec/ports/0", json!({"port": "http"}))), "request.object is not a valid Service at spec.ports[0].port: invalid type: string \"http\", expected i32")]
#[case::ports_not_a_list(bytes(&with(good(), "/request/object/spec/ports", json!({"port": 80}))), "request.object is not a valid Service at spec.ports: invalid type: map, expected a sequence")]
#[case::metadata_labels(bytes(&with(good(), "/request/object/metadata/labels", json!({"a": 1}))), "request.object is not a valid Service at metadata.labels: invalid type: integer `1`, expected a string")]
#[case::cluster_ips_not_list(bytes(&with(good(), "/request/object/spec/clusterIPs", json!("10.0.0.1"))), "request.object is not a valid Service at spec.clusterIPs: invalid type: string \"10.0.0.1\", expected a sequence")]
#[case::object_kind(bytes(&with(good(), "/request/object/kind", json!("Pod"))), "request.object is not a valid Service at kind: invalid value: string \"Pod\", expected Service")]
fn malformed_reviews_are_400_with_the_problem_named(#[case] body: Vec<u8>, #[case] want: &str) {
    let (status, msg) = bad(&body);
    assert_eq!(status, 400);
    assert_eq!(msg, want);
}

#[test]
fn malformed_old_object_is_named() {
    let obj = svc("web", cluster_ip_spec());
    let old = with(obj.clone(), "/spec/type", json!(5));
    let review = review_json("UPDATE", "u", &obj, Some(&old), false);
    let (status, msg) = bad(&bytes(&review));
    assert_eq!(status, 400);
    assert_eq!(
        msg,
        "request.oldObject is not a valid Service at spec.type: invalid type: integer `5`, expected a string"
    );
}

#[rstest]
#[case::other_resource("/request/resource", json!({"group": "apps", "version": "v1", "resource": "deployments"}), "resource \"apps/v1/deployments\" is not core/v1 services")]
#[case::other_version("/request/resource", json!({"group": "", "version": "v2", "resource": "services"}), "resource \"/v2/services\" is not core/v1 services")]
#[case::status_subresource("/request/subResource", json!("status"), "subresource services/status is not reviewed")]
#[case::delete("/request/operation", json!("DELETE"), "operation \"DELETE\" is not reviewed")]
#[case::connect("/request/operation", json!("CONNECT"), "operation \"CONNECT\" is not reviewed")]
fn other_requests_pass_through(#[case] pointer: &str, #[case] value: Value, #[case] why: &str) {
    let mut review = with(good(), pointer, value);
    // A DELETE carries no object; pass-through must not look at it.
    review["request"]["object"] = Value::Null;
    match decode(&bytes(&review)).unwrap() {
        Decoded::Passthrough { uid, reason } => {
            assert_eq!(uid, "u1");
            assert_eq!(reason, why);
        }
        other => panic!("reviewed: {other:?}"),
    }
}

#[test]
fn unknown_fields_do_not_break_decoding() {
    let mut obj = svc("web", cluster_ip_spec());
    obj["spec"]["someFutureField"] = json!({"nested": [1, 2]});
    obj["futureTopLevel"] = json!(true);
    let review = review_json("CREATE", "u", &obj, None, false);
    let Decoded::Service(r) = decode(&bytes(&review)).unwrap() else {
        panic!("passthrough")
    };
    assert_eq!(r.object["spec"]["someFutureField"]["nested"][1], 2);
}

/// Found by the admission fuzz target (webhook/tests/fuzz): a spec with 20 000 unknown
/// members and one bad field took minutes of CPU to refuse (the error locator decoded
/// the whole spec once per member), far past the request deadline, on a 300 KB body.
#[test]
fn a_malformed_object_with_thousands_of_unknown_members_is_refused_at_once() {
    let mut review = with(good(), "/request/object/spec/type", json!(5));
    let spec = review
        .pointer_mut("/request/object/spec")
        .and_then(Value::as_object_mut)
        .unwrap();
    for i in 0..20_000 {
        spec.insert(format!("unknown{i:05}"), json!(i));
    }
    let body = bytes(&review);
    let started = std::time::Instant::now();
    let (status, msg) = bad(&body);
    let took = started.elapsed();
    assert_eq!(status, 400);
    // Too many members to search for the culprit: the object is named, and serde's
    // text still names the bad value.
    assert_eq!(
        msg,
        "request.object is not a valid Service at spec: invalid type: integer `5`, expected a string"
    );
    // Was minutes in a debug build; now a handful of decodes.
    assert!(took < std::time::Duration::from_secs(10), "took {took:?}");
}
