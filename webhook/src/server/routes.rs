//! The routes: what each path answers, the body limit and the deadline.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode, Version, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, error, instrument, warn};

use crate::handler::{AdmissionHandler, Answer, Endpoint, MAX_BODY_BYTES};
use crate::tls::CertStatus;

/// What every route needs.
#[derive(Debug)]
struct App<H> {
    handler: Arc<H>,
    certs: Arc<CertStatus>,
    request_timeout: Duration,
    shutdown: CancellationToken,
}

// By hand: a derive would require `H: Clone`.
impl<H> Clone for App<H> {
    fn clone(&self) -> Self {
        Self {
            handler: self.handler.clone(),
            certs: self.certs.clone(),
            request_timeout: self.request_timeout,
            shutdown: self.shutdown.clone(),
        }
    }
}

/// The routes, without TLS or sockets: for [`super::bind`], and for tests that drive it with
/// `tower::ServiceExt::oneshot`. `/readyz` fails while `certs` is not loaded or once
/// `shutdown` has fired.
pub fn router<H: AdmissionHandler>(
    handler: Arc<H>,
    certs: Arc<CertStatus>,
    request_timeout: Duration,
    shutdown: CancellationToken,
) -> Router {
    let app = App {
        handler,
        certs,
        request_timeout,
        shutdown,
    };
    Router::new()
        .route(
            Endpoint::Mutate.path(),
            post(mutate::<H>).fallback(only_post),
        )
        .route(
            Endpoint::Validate.path(),
            post(validate::<H>).fallback(only_post),
        )
        .route("/healthz", get(healthz).fallback(only_get))
        .route("/readyz", get(readyz::<H>).fallback(only_get))
        .fallback(not_found)
        .with_state(app)
}

async fn mutate<H: AdmissionHandler>(State(app): State<App<H>>, req: Request) -> Response {
    admit(app, Endpoint::Mutate, req).await
}

async fn validate<H: AdmissionHandler>(State(app): State<App<H>>, req: Request) -> Response {
    admit(app, Endpoint::Validate, req).await
}

/// One admission call: read the body within the limit and the deadline, let the
/// handler answer within the same deadline.
#[instrument(skip_all, fields(endpoint = endpoint.label()))]
async fn admit<H: AdmissionHandler>(app: App<H>, endpoint: Endpoint, req: Request) -> Response {
    let started = Instant::now();
    let deadline = started + app.request_timeout;
    let version = req.version();
    let (parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());

    let (answer, body_bytes) = match declared {
        Some(n) if n > MAX_BODY_BYTES as u64 => (too_large(Some(n)), None),
        _ => match tokio::time::timeout_at(deadline, read_body(body)).await {
            Err(_) => (timed_out(app.request_timeout), None),
            Ok(Err(BodyError::TooLarge)) => (too_large(None), None),
            Ok(Err(BodyError::Read(e))) => {
                debug!(error = %e, "could not read the request body");
                (Answer::error(400, "could not read the request body"), None)
            }
            Ok(Ok(body)) => {
                let len = body.len();
                (call(&app, endpoint, body, deadline).await, Some(len))
            }
        },
    };

    let mut response = to_response(answer);
    // While draining, ask HTTP/1 clients to open their next connection elsewhere, so
    // that few of them are still mid-request on this one when it finally closes.
    // (HTTP/2 gets a GOAWAY at the end instead; it forbids this header.)
    if app.shutdown.is_cancelled() && version <= Version::HTTP_11 {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    debug!(
        status = response.status().as_u16(),
        body_bytes,
        elapsed_us = started.elapsed().as_micros() as u64,
        "answered"
    );
    response
}

/// Run the handler on its own task: if the deadline passes (or the client goes away)
/// the handler still runs to completion, so it never has to be cancel-safe (a
/// half-done mutation would otherwise leave a reservation behind). Its late answer is
/// dropped; the API server has applied its failurePolicy by then.
async fn call<H: AdmissionHandler>(
    app: &App<H>,
    endpoint: Endpoint,
    body: Bytes,
    deadline: Instant,
) -> Answer {
    let handler = app.handler.clone();
    let task = tokio::spawn(
        async move { handler.handle(endpoint, body).await }.instrument(tracing::Span::current()),
    );
    match tokio::time::timeout_at(deadline, task).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => {
            error!(error = %e, "admission handler panicked");
            Answer::error(500, "internal error in the admission handler")
        }
        Err(_) => timed_out(app.request_timeout),
    }
}

enum BodyError {
    TooLarge,
    Read(axum::BoxError),
}

async fn read_body(body: Body) -> Result<Bytes, BodyError> {
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(BodyError::TooLarge),
        Err(e) => Err(BodyError::Read(e)),
    }
}

fn too_large(declared: Option<u64>) -> Answer {
    let message = match declared {
        Some(n) => format!("request body of {n} bytes exceeds the {MAX_BODY_BYTES}-byte limit"),
        None => format!("request body exceeds the {MAX_BODY_BYTES}-byte limit"),
    };
    warn!(declared_bytes = declared, "request body too large");
    Answer::error(413, &message)
}

fn timed_out(limit: Duration) -> Answer {
    warn!(
        timeout_ms = limit.as_millis() as u64,
        "admission request timed out"
    );
    Answer::error(
        504,
        &format!("the admission request was not answered within {limit:?}"),
    )
}

fn to_response(answer: Answer) -> Response {
    match StatusCode::from_u16(answer.status) {
        Ok(status) => json(status, answer.body),
        Err(_) => {
            error!(
                status = answer.status,
                "admission handler answered an invalid HTTP status"
            );
            let fallback = Answer::error(500, "internal error in the admission handler");
            json(StatusCode::INTERNAL_SERVER_ERROR, fallback.body)
        }
    }
}

fn json(status: StatusCode, body: Vec<u8>) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz<H: AdmissionHandler>(State(app): State<App<H>>) -> Response {
    let mut missing = Vec::new();
    if app.shutdown.is_cancelled() {
        missing.push("shutting down");
    }
    if !app.certs.is_loaded() {
        missing.push("no valid TLS certificate loaded");
    }
    if !app.handler.is_ready() {
        missing.push("admission state not synced yet");
    }
    if missing.is_empty() {
        (StatusCode::OK, "ok").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}", missing.join("; ")),
        )
            .into_response()
    }
}

async fn only_post(method: Method) -> Response {
    not_allowed(method, "POST")
}

async fn only_get(method: Method) -> Response {
    not_allowed(method, "GET")
}

/// axum adds the `Allow` header itself.
fn not_allowed(method: Method, allowed: &str) -> Response {
    let answer = Answer::error(
        405,
        &format!("method {method} is not allowed here; use {allowed}"),
    );
    json(StatusCode::METHOD_NOT_ALLOWED, answer.body)
}

async fn not_found() -> Response {
    let answer = Answer::error(
        404,
        "no such path; the webhook serves POST /mutate-services and POST /validate-services",
    );
    json(StatusCode::NOT_FOUND, answer.body)
}
