//! The AdmissionReview v1 response envelope.
//!
//! A denial carries a `metav1.Status` built exactly like kube-apiserver builds its own
//! (WH-9, apimachinery `NewInvalid`/`NewInternalError`/`ErrorToAPIStatus`),
//! because the API server passes the webhook's status through to the client with only a
//! message prefix added (WH-10.2). So:
//!
//! - 422 `Invalid`: `details {name, kind: "Service", causes[{reason, message, field}]}`;
//! - 500 `InternalError`: message `Internal error occurred: <text>` and
//!   `details.causes[0].message = <text>`, with no name or kind (upstream sets neither);
//! - 500 `Unknown`: the raw message and no details.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Serialize;
use svcplane_allocator::ServiceError;

use super::Verdict;
use super::decode::ADMISSION_API_VERSION;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Review<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: Response<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Response<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

#[derive(Serialize)]
struct Status {
    metadata: Empty,
    status: &'static str,
    message: String,
    reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Details>,
    code: u16,
}

/// `metadata: {}` (a `ListMeta` with nothing set).
#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct Details {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    causes: Vec<Cause>,
}

#[derive(Serialize)]
struct Cause {
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<String>,
}

fn status_of(e: &ServiceError) -> Status {
    let details = match e {
        ServiceError::Invalid { name, errors } => Some(Details {
            name: (!name.is_empty()).then(|| name.clone()),
            kind: Some("Service"),
            causes: errors
                .iter()
                .map(|f| Cause {
                    reason: Some(f.error_type.cause_reason()),
                    message: f.body(),
                    field: Some(f.field.clone()),
                })
                .collect(),
        }),
        ServiceError::Internal(text) => Some(Details {
            name: None,
            kind: None,
            causes: vec![Cause {
                reason: None,
                message: text.clone(),
                field: None,
            }],
        }),
        ServiceError::Unknown(_) => None,
    };
    Status {
        metadata: Empty {},
        status: "Failure",
        message: e.to_string(),
        reason: e.reason(),
        details,
        code: e.code(),
    }
}

/// The AdmissionReview answering request `uid` with `verdict`, as compact JSON bytes.
pub fn review_response(uid: &str, verdict: &Verdict) -> Vec<u8> {
    let response = match verdict {
        Verdict::Allow { patch, warnings } => {
            let encoded = if patch.0.is_empty() {
                None
            } else {
                serde_json::to_vec(patch).ok().map(|b| STANDARD.encode(b))
            };
            Response {
                uid,
                allowed: true,
                status: None,
                patch_type: encoded.as_ref().map(|_| "JSONPatch"),
                patch: encoded,
                warnings,
            }
        }
        Verdict::Deny(e) => Response {
            uid,
            allowed: false,
            status: Some(status_of(e)),
            patch_type: None,
            patch: None,
            warnings: &[],
        },
    };
    let review = Review {
        api_version: ADMISSION_API_VERSION,
        kind: "AdmissionReview",
        response,
    };
    // Serialising these plain structs cannot fail; if it ever did, answer with a
    // well-formed denial rather than an empty body the API server cannot parse.
    serde_json::to_vec(&review).unwrap_or_else(|_| {
        let uid = serde_json::to_string(uid).unwrap_or_else(|_| "\"\"".into());
        format!(
            r#"{{"apiVersion":"{ADMISSION_API_VERSION}","kind":"AdmissionReview","response":{{"uid":{uid},"allowed":false,"status":{{"metadata":{{}},"status":"Failure","message":"unencodable admission response","reason":"InternalError","code":500}}}}}}"#
        )
        .into_bytes()
    })
}
