//! AdmissionReview v1 decoding.
//!
//! A malformed review is the API server's (or an impostor's) fault, not the user's, so
//! it gets a 400 naming exactly what is wrong instead of a denial. Reviews for anything
//! but a `services` CREATE/UPDATE are passed through (allowed unchanged): the webhook
//! configuration should not send them, and refusing them would break unrelated writes.
//!
//! The raw `object` is kept next to the typed Service: k8s-openapi (v1_33 API) silently
//! drops fields newer API servers send, so patches are built against the raw JSON.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec, ServiceStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize as _;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::handler::MAX_BODY_BYTES;
use crate::state::ServiceRef;

/// The only AdmissionReview version served (`admissionReviewVersions: ["v1"]`).
pub(super) const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";

/// A review that cannot be answered: HTTP `status` (400, or 413 for an oversized body)
/// and a message naming the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BadRequest {
    /// HTTP status code.
    pub status: u16,
    /// What is wrong.
    pub message: String,
}

impl BadRequest {
    fn new(message: impl Into<String>) -> Self {
        Self {
            status: 400,
            message: message.into(),
        }
    }
}

/// Admission operation of a reviewed Service write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `CREATE`.
    Create,
    /// `UPDATE`.
    Update,
}

impl Operation {
    /// As the AdmissionReview spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
        }
    }
}

/// A Service CREATE or UPDATE under review.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceRequest {
    /// `request.uid`, echoed in the response.
    pub uid: String,
    /// CREATE or UPDATE.
    pub operation: Operation,
    /// `request.dryRun`.
    pub dry_run: bool,
    /// `request.namespace` (or the object's namespace when the request has none).
    pub namespace: String,
    /// `request.name`, or the object's name; empty on a `generateName` create.
    pub name: String,
    /// `request.object` exactly as received; patches address this document.
    pub object: Value,
    /// The object decoded as a Service (fields unknown to k8s-openapi are dropped).
    pub service: Service,
    /// `request.oldObject` decoded (UPDATE only).
    pub old_service: Option<Service>,
}

impl ServiceRequest {
    /// `metadata.generateName` of the object (empty when unset).
    pub fn generate_name(&self) -> &str {
        self.service
            .metadata
            .generate_name
            .as_deref()
            .unwrap_or_default()
    }

    /// The identity values are reserved and checked under.
    pub fn service_ref(&self) -> ServiceRef {
        ServiceRef::of_request(&self.namespace, &self.name, self.generate_name(), &self.uid)
    }
}

/// Result of decoding one review.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// A Service CREATE/UPDATE to review.
    Service(Box<ServiceRequest>),
    /// Anything else: answer allowed, unchanged, and log `reason`.
    Passthrough {
        /// `request.uid`.
        uid: String,
        /// Why it is not reviewed.
        reason: String,
    },
}

/// Decode an AdmissionReview v1 body.
pub fn decode(body: &[u8]) -> Result<Decoded, BadRequest> {
    if body.len() > MAX_BODY_BYTES {
        return Err(BadRequest {
            status: 413,
            message: format!(
                "AdmissionReview body is {} bytes; the limit is {MAX_BODY_BYTES}",
                body.len()
            ),
        });
    }
    let review: Value = serde_json::from_slice(body).map_err(|e| {
        if e.is_eof() {
            BadRequest::new(format!("truncated AdmissionReview body: {e}"))
        } else {
            BadRequest::new(format!("AdmissionReview body is not valid JSON: {e}"))
        }
    })?;
    let Value::Object(review) = review else {
        return Err(BadRequest::new(format!(
            "AdmissionReview body must be a JSON object, got {}",
            type_name(&review)
        )));
    };
    expect_str(&review, "apiVersion", ADMISSION_API_VERSION)?;
    expect_str(&review, "kind", "AdmissionReview")?;
    let request = match review.get("request") {
        Some(Value::Object(r)) => r,
        None | Some(Value::Null) => {
            return Err(BadRequest::new("AdmissionReview has no request"));
        }
        Some(other) => {
            return Err(BadRequest::new(format!(
                "request must be a JSON object, got {}",
                type_name(other)
            )));
        }
    };
    let uid = match request.get("uid") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::String(_)) => return Err(BadRequest::new("request.uid is empty")),
        None | Some(Value::Null) => return Err(BadRequest::new("request.uid is missing")),
        Some(other) => {
            return Err(BadRequest::new(format!(
                "request.uid must be a string, got {}",
                type_name(other)
            )));
        }
    };

    let operation = str_field(request, "operation");
    let resource = request.get("resource").and_then(Value::as_object);
    let gvr = |k: &str| resource.map_or("", |r| str_field(r, k));
    let (group, version, res) = (gvr("group"), gvr("version"), gvr("resource"));
    if (group, version, res) != ("", "v1", "services") {
        return Ok(Decoded::Passthrough {
            uid,
            reason: format!(
                "resource {:?} is not core/v1 services",
                format!("{group}/{version}/{res}")
            ),
        });
    }
    let sub = str_field(request, "subResource");
    if !sub.is_empty() {
        return Ok(Decoded::Passthrough {
            uid,
            reason: format!("subresource services/{sub} is not reviewed"),
        });
    }
    let operation = match operation {
        "CREATE" => Operation::Create,
        "UPDATE" => Operation::Update,
        other => {
            return Ok(Decoded::Passthrough {
                uid,
                reason: format!("operation {other:?} is not reviewed"),
            });
        }
    };
    let op_name = match operation {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
    };

    let object = match request.get("object") {
        Some(v @ Value::Object(_)) => v.clone(),
        other => {
            return Err(BadRequest::new(format!(
                "request.object must be a JSON object on {op_name}, got {}",
                other.map_or("nothing", type_name)
            )));
        }
    };
    let service = decode_service(&object, "request.object")?;
    let old_service = match operation {
        Operation::Create => None,
        Operation::Update => match request.get("oldObject") {
            Some(v @ Value::Object(_)) => Some(decode_service(v, "request.oldObject")?),
            other => {
                return Err(BadRequest::new(format!(
                    "request.oldObject must be a JSON object on UPDATE, got {}",
                    other.map_or("nothing", type_name)
                )));
            }
        },
    };
    let dry_run = match request.get("dryRun") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(BadRequest::new(format!(
                "request.dryRun must be a boolean, got {}",
                type_name(other)
            )));
        }
    };
    let or_object = |from_request: &str, from_object: &Option<String>| {
        if from_request.is_empty() {
            from_object.clone().unwrap_or_default()
        } else {
            from_request.to_string()
        }
    };
    let namespace = or_object(str_field(request, "namespace"), &service.metadata.namespace);
    let name = or_object(str_field(request, "name"), &service.metadata.name);
    Ok(Decoded::Service(Box::new(ServiceRequest {
        uid,
        operation,
        dry_run,
        namespace,
        name,
        object,
        service,
        old_service,
    })))
}

fn str_field<'a>(m: &'a Map<String, Value>, key: &str) -> &'a str {
    m.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn expect_str(m: &Map<String, Value>, key: &str, want: &str) -> Result<(), BadRequest> {
    match m.get(key) {
        Some(Value::String(s)) if s == want => Ok(()),
        Some(Value::String(s)) => Err(BadRequest::new(format!(
            "{key} must be {want:?}, got {s:?}"
        ))),
        None | Some(Value::Null) => Err(BadRequest::new(format!(
            "{key} must be {want:?}, got nothing"
        ))),
        Some(other) => Err(BadRequest::new(format!(
            "{key} must be {want:?}, got {}",
            type_name(other)
        ))),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn decode_service(v: &Value, what: &str) -> Result<Service, BadRequest> {
    Service::deserialize(v).map_err(|e| {
        let at = locate(v, Shape::Service, String::new());
        let at = if at.is_empty() {
            String::new()
        } else {
            format!(" at {at}")
        };
        BadRequest::new(format!("{what} is not a valid Service{at}: {e}"))
    })
}

/// The k8s-openapi types a Service is made of, as far as the error locator descends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Service,
    Meta,
    Spec,
    Status,
    Port,
    Ports,
    Leaf,
}

impl Shape {
    fn child(self, key: &str) -> Self {
        match (self, key) {
            (Self::Service, "metadata") => Self::Meta,
            (Self::Service, "spec") => Self::Spec,
            (Self::Service, "status") => Self::Status,
            (Self::Spec, "ports") => Self::Ports,
            _ => Self::Leaf,
        }
    }

    fn decodes(self, v: &Value) -> bool {
        fn ok<T: DeserializeOwned>(v: &Value) -> bool {
            T::deserialize(v).is_ok()
        }
        match self {
            Self::Service => ok::<Service>(v),
            Self::Meta => ok::<ObjectMeta>(v),
            Self::Spec => ok::<ServiceSpec>(v),
            Self::Status => ok::<ServiceStatus>(v),
            Self::Port => ok::<ServicePort>(v),
            Self::Ports => ok::<Vec<ServicePort>>(v),
            Self::Leaf => true,
        }
    }
}

/// More members than any of the searched types has fields (ServiceSpec, the largest,
/// has about 25): the others can only be unknown fields, which decoding ignores. The
/// search below costs one decode of the whole object per member, so on an object of
/// 20 000 members (300 KB, well under the body limit) it took minutes of CPU per
/// request. The API server never sends such an object (it serialises typed ones), but
/// anyone who reaches the port can; such an object is blamed as a whole instead.
const MAX_SEARCHED_MEMBERS: usize = 64;

/// Field path of the first part of `v` that does not decode as `shape` (only called
/// on the error path, so a few re-decodes are cheap): a key is to blame when the object
/// decodes without it; a struct with a missing field blames the struct itself.
fn locate(v: &Value, shape: Shape, path: String) -> String {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match (shape, v) {
        (Shape::Ports, Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                if !Shape::Port.decodes(item) {
                    return locate(item, Shape::Port, format!("{path}[{i}]"));
                }
            }
            path
        }
        (Shape::Leaf, _) => path,
        (_, Value::Object(m)) if m.len() <= MAX_SEARCHED_MEMBERS => {
            // One copy per level (not per member: a member may be megabytes); each
            // member is taken out, the rest tried, and the member put back.
            let mut without = m.clone();
            for (k, child) in m {
                let taken = without.remove_entry(k);
                let rest = Value::Object(std::mem::take(&mut without));
                let blamed = shape.decodes(&rest);
                if let Value::Object(back) = rest {
                    without = back;
                }
                if let Some((k, member)) = taken {
                    without.insert(k, member);
                }
                if blamed {
                    return locate(child, shape.child(k), join(k));
                }
            }
            path
        }
        _ => path,
    }
}
