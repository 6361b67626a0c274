//! The seam between the HTTPS server and the admission logic.
//!
//! The server only moves bytes: it enforces the body limit and the request timeout and
//! hands the raw body to an [`AdmissionHandler`]. Keeping the seam this narrow lets the
//! server be tested with a stand-in handler and the handler be tested without sockets.

use std::future::Future;

use bytes::Bytes;

/// Largest AdmissionReview body accepted; larger ones get HTTP 413. kube-apiserver caps
/// request bodies at 3 MiB, so a bigger review cannot be a genuine one.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Which webhook path was called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `POST /mutate-services`.
    Mutate,
    /// `POST /validate-services`.
    Validate,
}

impl Endpoint {
    /// The URL path the server routes to this endpoint.
    pub fn path(self) -> &'static str {
        match self {
            Self::Mutate => "/mutate-services",
            Self::Validate => "/validate-services",
        }
    }

    /// A short label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            Self::Mutate => "mutate",
            Self::Validate => "validate",
        }
    }
}

/// An HTTP answer: status code and a JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// HTTP status: 200 for every AdmissionReview answer (allowed or denied), 400 for a
    /// malformed review, 413 for an oversized body.
    pub status: u16,
    /// JSON body (an AdmissionReview, or `{"error": "..."}` for 4xx).
    pub body: Vec<u8>,
}

impl Answer {
    /// A 4xx answer whose body is `{"error": message}`.
    pub fn error(status: u16, message: &str) -> Self {
        let body = serde_json::to_vec(&serde_json::json!({ "error": message }))
            .unwrap_or_else(|_| br#"{"error":"unencodable error message"}"#.to_vec());
        Self { status, body }
    }
}

/// What the server needs from the admission logic. Implementations never panic on user
/// input: every failure is an [`Answer`].
pub trait AdmissionHandler: Send + Sync + 'static {
    /// Answer one request body posted to `endpoint`.
    fn handle(&self, endpoint: Endpoint, body: Bytes) -> impl Future<Output = Answer> + Send;

    /// True once the handler can give correct answers (its allocation state has seen
    /// the first full list of every watched source).
    fn is_ready(&self) -> bool;
}
