//! Error answers as real `metav1.Status` bodies.
//!
//! kube-rs turns a non-2xx answer whose body parses as a `Status` into `kube::Error::Api`,
//! and callers branch on `code` and `reason`. So every error here carries the same code,
//! reason, message and details the upstream API server would send.

use serde_json::{Value, json};

use super::registry::ResourceInfo;

/// One failed request, ready to be rendered as a `Status`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    pub(crate) code: u16,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
    details: Option<Value>,
    /// Seconds for the `Retry-After` header and `details.retryAfterSeconds`.
    pub(crate) retry_after: Option<u32>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    fn with_details(mut self, name: &str, group: &str, kind: &str) -> Self {
        self.details = Some(json!({ "name": name, "group": group, "kind": kind }));
        self
    }

    fn for_object(self, info: &ResourceInfo, name: &str) -> Self {
        self.with_details(name, &info.gvr.group, &info.gvr.plural)
    }

    /// `services "web" not found`.
    pub(crate) fn not_found(info: &ResourceInfo, name: &str) -> Self {
        let msg = format!("{} \"{name}\" not found", info.gvr.qualified());
        Self::new(404, "NotFound", msg).for_object(info, name)
    }

    /// The answer for a path or resource the server does not serve.
    pub(crate) fn unknown_resource() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// `services "web" already exists`.
    pub(crate) fn already_exists(info: &ResourceInfo, name: &str) -> Self {
        let msg = format!("{} \"{name}\" already exists", info.gvr.qualified());
        Self::new(409, "AlreadyExists", msg).for_object(info, name)
    }

    /// `Operation cannot be fulfilled on services "web": <why>`.
    pub(crate) fn conflict(info: &ResourceInfo, name: &str, why: &str) -> Self {
        let msg = format!(
            "Operation cannot be fulfilled on {} \"{name}\": {why}",
            info.gvr.qualified()
        );
        Self::new(409, "Conflict", msg).for_object(info, name)
    }

    /// The resourceVersion precondition failed.
    pub(crate) fn stale(info: &ResourceInfo, name: &str) -> Self {
        Self::conflict(
            info,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 with one field cause, as validation errors are reported.
    pub(crate) fn invalid(info: &ResourceInfo, name: &str, field: &str, detail: &str) -> Self {
        let msg = format!("{} \"{name}\" is invalid: {field}: {detail}", info.kind);
        let mut e = Self::new(422, "Invalid", msg);
        e.details = Some(json!({
            "name": name,
            "group": info.gvr.group,
            "kind": info.kind,
            "causes": [{ "reason": "FieldValueRequired", "message": detail, "field": field }],
        }));
        e
    }

    /// 422 without field causes (a JSON patch that does not apply).
    pub(crate) fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub(crate) fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    pub(crate) fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format ({content_type}) - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json"
            ),
        )
    }

    /// 410 for a watch from a resourceVersion older than the kept history.
    pub(crate) fn expired(requested: u64, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {requested} ({oldest})"),
        )
    }

    /// The error a fault rule injects for `code`, with upstream's reason for that code.
    pub(crate) fn injected(code: u16) -> Self {
        let (reason, message) = match code {
            409 => ("Conflict", "injected fault: conflict"),
            410 => ("Expired", "injected fault: resource version expired"),
            429 => (
                "TooManyRequests",
                "Too many requests, please try again later.",
            ),
            500 => ("InternalError", "Internal error occurred: injected fault"),
            503 => ("ServiceUnavailable", "injected fault: service unavailable"),
            504 => ("Timeout", "injected fault: timeout"),
            404 => ("NotFound", "injected fault: not found"),
            403 => ("Forbidden", "injected fault: forbidden"),
            _ => ("", "injected fault"),
        };
        let mut e = Self::new(code, reason, message);
        if code == 429 {
            e.retry_after = Some(1);
            e.details = Some(json!({ "retryAfterSeconds": 1 }));
        }
        e
    }

    /// The `Status` object.
    pub(crate) fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let (Some(details), Some(map)) = (&self.details, status.as_object_mut()) {
            map.insert("details".to_string(), details.clone());
        }
        status
    }
}
