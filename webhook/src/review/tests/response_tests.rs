//! Shape of the AdmissionReview response (WH-9, WH-10.2).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use svcplane_allocator::families::INVALID_IP_MSG;
use svcplane_allocator::{FieldError, FieldValue, ServiceError};

use crate::review::{Verdict, review_response};

fn answer(v: &Verdict) -> Value {
    serde_json::from_slice(&review_response("uid-9", v)).unwrap()
}

fn empty_patch() -> json_patch::Patch {
    json_patch::Patch(Vec::new())
}

#[test]
fn rule_9_invalid_status_matches_the_documented_example() {
    let e = ServiceError::invalid(
        "web",
        FieldError::invalid(
            "spec.clusterIPs[0]",
            FieldValue::Str("garbage".into()),
            INVALID_IP_MSG,
        ),
    );
    let got = answer(&Verdict::Deny(e));
    // The WH-9 example without `kind`/`apiVersion`, which the API server's encoder adds.
    let want = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": "uid-9",
            "allowed": false,
            "status": {
                "metadata": {},
                "status": "Failure",
                "message": "Service \"web\" is invalid: spec.clusterIPs[0]: Invalid value: \"garbage\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                "reason": "Invalid",
                "details": {
                    "name": "web",
                    "kind": "Service",
                    "causes": [{
                        "reason": "FieldValueInvalid",
                        "message": "Invalid value: \"garbage\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                        "field": "spec.clusterIPs[0]"
                    }]
                },
                "code": 422
            }
        }
    });
    assert_eq!(got, want);
}

#[test]
fn response_bytes_are_compact() {
    let bytes = review_response(
        "u",
        &Verdict::Allow {
            patch: empty_patch(),
            warnings: Vec::new(),
        },
    );
    assert_eq!(
        String::from_utf8(bytes).unwrap(),
        r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":true}}"#
    );
}

#[test]
fn allow_with_patch_carries_base64_json_patch() {
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/spec/clusterIP", "value": "10.0.0.7"}
    ]))
    .unwrap();
    let got = answer(&Verdict::Allow {
        patch: patch.clone(),
        warnings: vec!["w1".into()],
    });
    let r = &got["response"];
    assert_eq!(r["allowed"], true);
    assert_eq!(r["patchType"], "JSONPatch");
    let decoded = STANDARD.decode(r["patch"].as_str().unwrap()).unwrap();
    let ops: Value = serde_json::from_slice(&decoded).unwrap();
    assert_eq!(ops, serde_json::to_value(&patch).unwrap());
    assert_eq!(r["warnings"], json!(["w1"]));
    assert!(r.get("status").is_none());
}

#[test]
fn allow_without_patch_has_no_patch_fields() {
    let got = answer(&Verdict::Allow {
        patch: empty_patch(),
        warnings: Vec::new(),
    });
    let r = got["response"].as_object().unwrap();
    assert_eq!(r.keys().collect::<Vec<_>>(), ["allowed", "uid"]);
}

#[test]
fn internal_error_has_upstream_shape() {
    let got = answer(&Verdict::Deny(ServiceError::Internal(
        "failed to allocate a serviceIP: range is full".into(),
    )));
    assert_eq!(
        got["response"]["status"],
        json!({
            "metadata": {},
            "status": "Failure",
            "message": "Internal error occurred: failed to allocate a serviceIP: range is full",
            "reason": "InternalError",
            "details": {"causes": [{"message": "failed to allocate a serviceIP: range is full"}]},
            "code": 500
        })
    );
    assert_eq!(got["response"]["allowed"], false);
    assert!(got["response"].get("patch").is_none());
}

#[test]
fn unknown_error_has_no_details() {
    let got = answer(&Verdict::Deny(ServiceError::Unknown(
        "duplicate nodePort: {TCP 30001}".into(),
    )));
    assert_eq!(
        got["response"]["status"],
        json!({
            "metadata": {},
            "status": "Failure",
            "message": "duplicate nodePort: {TCP 30001}",
            "reason": "Unknown",
            "code": 500
        })
    );
}

#[test]
fn several_causes_and_nameless_service() {
    let e = ServiceError::Invalid {
        name: String::new(),
        errors: vec![
            FieldError::required("spec.clusterIPs", ""),
            FieldError::forbidden("spec.healthCheckNodePort", "field is immutable"),
        ],
    };
    let got = answer(&Verdict::Deny(e));
    let status = &got["response"]["status"];
    assert_eq!(
        status["message"],
        "Service \"\" is invalid: [spec.clusterIPs: Required value, spec.healthCheckNodePort: Forbidden: field is immutable]"
    );
    assert_eq!(
        status["details"],
        json!({
            "kind": "Service",
            "causes": [
                {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.clusterIPs"},
                {"reason": "FieldValueForbidden", "message": "Forbidden: field is immutable", "field": "spec.healthCheckNodePort"}
            ]
        })
    );
}
