//! The `tower::Service` behind `kube::Client`: HTTP request in, store operation, HTTP out.
//!
//! Order of work for each request: read the body, route it, let fault rules delay or fail it,
//! run it under the store lock (never awaiting while locked), render the answer outside the
//! lock, count it. Requests from many tasks run concurrently; the store lock makes each one
//! atomic, so create-if-absent has exactly one winner.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::Value;

use super::list;
use super::ops::{self, Preconditions};
use super::patch::PatchKind;
use super::registry::ResourceInfo;
use super::router::{Query, Route, parse_path};
use super::selector::{FieldSelector, Filter, LabelSelector};
use super::stats::{Verb, WriteRecord};
use super::status::ApiError;
use super::store::{Store, key};
use super::watch::{self, WatchParams};
use super::{Shared, lock};

/// The response body type: a buffered JSON document or a watch stream.
pub type FakeBody = UnsyncBoxBody<Bytes, Infallible>;

/// Default watch length when the client gives no `timeoutSeconds` (upstream: 30–60 min).
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// The fake API server as a tower service; cheap to clone (shares state with its
/// [`FakeApi`](super::FakeApi)).
#[derive(Debug, Clone)]
pub struct FakeService {
    pub(crate) shared: Arc<Shared>,
}

impl tower::Service<Request<kube::client::Body>> for FakeService {
    type Response = Response<FakeBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<kube::client::Body>) -> Self::Future {
        let shared = self.shared.clone();
        Box::pin(async move { Ok(handle(shared, req).await) })
    }
}

/// What one request is, once routed.
struct Call {
    verb: Verb,
    route: Route,
    query: Query,
    /// `plural` or `plural/subresource`, for stats and fault matching.
    resource: String,
    body: Bytes,
    dry_run: bool,
    meta_only: bool,
}

fn classify(method: &Method, route: &Route, query: &Query) -> Option<Verb> {
    let named = route.name.is_some();
    Some(match *method {
        Method::GET if named => Verb::Get,
        Method::GET if query.flag("watch") => Verb::Watch,
        Method::GET => Verb::List,
        Method::POST if !named => Verb::Create,
        Method::PUT if named => Verb::Update,
        Method::PATCH if named => Verb::Patch,
        Method::DELETE if named => Verb::Delete,
        _ => return None,
    })
}

fn json_response(code: u16, body: Vec<u8>, retry_after: Option<u32>) -> Response<FakeBody> {
    let mut resp = Response::new(Full::new(Bytes::from(body)).boxed_unsync());
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    if let Some(secs) = retry_after {
        headers.insert(header::RETRY_AFTER, http::HeaderValue::from(secs));
    }
    resp
}

fn error_body(err: &ApiError) -> Vec<u8> {
    // Serialising a JSON value cannot fail.
    serde_json::to_vec(&err.to_status()).unwrap_or_default()
}

async fn handle(shared: Arc<Shared>, req: Request<kube::client::Body>) -> Response<FakeBody> {
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect_bytes().await else {
        let err = ApiError::bad_request("could not read the request body");
        return json_response(400, error_body(&err), None);
    };
    let query = Query::parse(parts.uri.query());
    let Some(route) = parse_path(parts.uri.path()) else {
        return json_response(404, error_body(&ApiError::unknown_resource()), None);
    };
    let Some(verb) = classify(&parts.method, &route, &query) else {
        return json_response(405, error_body(&ApiError::method_not_allowed()), None);
    };
    let resource = match &route.subresource {
        Some(sub) => format!("{}/{sub}", route.gvr.plural),
        None => route.gvr.plural.clone(),
    };
    let dry_run = query.get("dryRun") == Some("All") || delete_body_dry_run(verb, &body);
    let meta_only = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("as=PartialObjectMetadata"));
    let call = Call {
        verb,
        route,
        query,
        resource,
        body,
        dry_run,
        meta_only,
    };

    let outcome = lock(&shared.faults).evaluate(verb, &call.resource);
    if !outcome.latency.is_zero() {
        tokio::time::sleep(outcome.latency).await;
    }
    if let Some(code) = outcome.status {
        let err = ApiError::injected(code);
        if verb.is_write() {
            record(&mut lock(&shared.store), &call, None, code);
        }
        if verb == Verb::Watch && code == 410 {
            account(&shared, &call, 200, 0);
            return expired_watch(shared, &call, err);
        }
        let body = error_body(&err);
        account(&shared, &call, code, body.len());
        return json_response(code, body, err.retry_after);
    }

    if verb == Verb::Watch {
        return match start_watch(&shared, &call) {
            Ok(resp) => {
                account(&shared, &call, 200, 0);
                resp
            }
            Err(err) => {
                let body = error_body(&err);
                account(&shared, &call, err.code, body.len());
                json_response(err.code, body, None)
            }
        };
    }

    let content_type = content_type(&parts.headers);
    let (code, body) = match execute(&shared, &call, &content_type) {
        Ok(Answer::Object(code, obj)) => {
            let obj = if call.meta_only {
                super::meta::partial(&obj)
            } else {
                (*obj).clone()
            };
            (code, serde_json::to_vec(&obj).unwrap_or_default())
        }
        Ok(Answer::List(info, page)) => (200, list::render(&info, &page, call.meta_only)),
        Err(err) => (err.code, error_body(&err)),
    };
    account(&shared, &call, code, body.len());
    json_response(code, body, None)
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// `DeleteOptions.dryRun: ["All"]` in a DELETE body.
fn delete_body_dry_run(verb: Verb, body: &[u8]) -> bool {
    verb == Verb::Delete
        && serde_json::from_slice::<Value>(body).is_ok_and(|v| {
            v.get("dryRun")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|x| x == "All"))
        })
}

fn account(shared: &Shared, call: &Call, code: u16, response_bytes: usize) {
    let mut stats = lock(&shared.stats);
    let c = stats.entry(call.verb, &call.resource);
    c.requests += 1;
    c.errors += u64::from(code >= 400);
    c.dry_run += u64::from(call.dry_run);
    c.request_bytes += call.body.len() as u64;
    c.response_bytes += response_bytes as u64;
}

/// Appends to the write log (`name`: the final name when the write produced an object).
/// Called with the store lock held, so the log order is the commit order.
fn record(store: &mut Store, call: &Call, name: Option<&str>, code: u16) {
    let name = name
        .map(str::to_string)
        .or_else(|| call.route.name.clone())
        .or_else(|| {
            let body: Value = serde_json::from_slice(&call.body).ok()?;
            let meta = body.get("metadata")?;
            let name = meta.get("name").or_else(|| meta.get("generateName"))?;
            name.as_str().map(str::to_string)
        })
        .unwrap_or_default();
    store.record(WriteRecord {
        verb: call.verb,
        group: call.route.gvr.group.clone(),
        resource: call.route.gvr.plural.clone(),
        subresource: call.route.subresource.clone(),
        namespace: call.route.namespace.clone(),
        name,
        code,
        dry_run: call.dry_run,
    });
}

/// The registered resource for a route, if the path shape fits its scope.
fn resolve(shared: &Shared, route: &Route) -> Result<ResourceInfo, ApiError> {
    let info = lock(&shared.store)
        .registry
        .lookup(&route.gvr)
        .cloned()
        .ok_or_else(ApiError::unknown_resource)?;
    let scope_ok = !matches!(
        (info.namespaced, &route.namespace, &route.name),
        (false, Some(_), _) | (true, None, Some(_))
    );
    let sub_ok = match route.subresource.as_deref() {
        None => true,
        Some(sub) => sub == "status" && info.status,
    };
    if scope_ok && sub_ok {
        Ok(info)
    } else {
        Err(ApiError::unknown_resource())
    }
}

fn filter(call: &Call) -> Result<Filter, ApiError> {
    let labels = LabelSelector::parse(call.query.get("labelSelector").unwrap_or_default())
        .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
    let fields = FieldSelector::parse(call.query.get("fieldSelector").unwrap_or_default())
        .map_err(|e| ApiError::bad_request(format!("invalid field selector: {e}")))?;
    Ok(Filter {
        namespace: call.route.namespace.clone(),
        labels,
        fields,
    })
}

enum Answer {
    Object(u16, Arc<Value>),
    List(ResourceInfo, list::Page),
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

fn preconditions(body: &[u8]) -> Preconditions {
    let opts: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let get = |k: &str| {
        opts.get("preconditions")
            .and_then(|p| p.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    Preconditions {
        uid: get("uid"),
        resource_version: get("resourceVersion"),
    }
}

/// Runs a non-watch request under the store lock.
fn execute(shared: &Shared, call: &Call, content_type: &str) -> Result<Answer, ApiError> {
    let info = resolve(shared, &call.route)?;
    let filter = filter(call)?;
    let ns = call.route.namespace.as_deref();
    let name = call.route.name.as_deref().unwrap_or_default();
    let status_only = call.route.subresource.is_some();
    let dry = call.dry_run;
    let mut store = lock(&shared.store);
    let result = match call.verb {
        Verb::Get => store
            .get(&info.gvr, &key(ns, name))
            .map(|o| Answer::Object(200, o))
            .ok_or_else(|| ApiError::not_found(&info, name)),
        Verb::List => {
            let limit = call.query.get("limit").and_then(|l| l.parse().ok());
            let token = call.query.get("continue");
            return list::list(&store, &info, &filter, limit, token).map(|p| Answer::List(info, p));
        }
        Verb::Watch => Err(ApiError::method_not_allowed()),
        Verb::Create => parse_json(&call.body)
            .and_then(|obj| ops::create(&mut store, &info, ns, obj, dry))
            .map(|o| Answer::Object(201, o)),
        Verb::Update => parse_json(&call.body)
            .and_then(|obj| ops::update(&mut store, &info, ns, name, obj, status_only, dry))
            .map(|o| Answer::Object(200, o)),
        Verb::Patch => PatchKind::from_content_type(content_type)
            .and_then(|kind| {
                let body = &call.body;
                ops::patch(&mut store, &info, ns, name, kind, body, status_only, dry)
            })
            .map(|o| Answer::Object(200, o)),
        Verb::Delete => {
            let pre = preconditions(&call.body);
            ops::delete(&mut store, &info, ns, name, &pre, dry).map(|o| Answer::Object(200, o))
        }
    };
    if call.verb.is_write() {
        let (code, name) = match &result {
            Ok(Answer::Object(code, obj)) => (*code, super::meta::field(obj, "name")),
            Ok(Answer::List(..)) => (200, None),
            Err(e) => (e.code, None),
        };
        record(&mut store, call, name, code);
    }
    result
}

/// Opens a watch and answers 200 with its stream.
fn start_watch(shared: &Arc<Shared>, call: &Call) -> Result<Response<FakeBody>, ApiError> {
    let info = resolve(shared, &call.route)?;
    let filter = filter(call)?;
    let send_initial_events = call.query.flag("sendInitialEvents");
    let since = match call.query.get("resourceVersion") {
        _ if send_initial_events => None,
        None | Some("" | "0") => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}")))?,
        ),
    };
    let timeout = call
        .query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|t| *t > 0)
        .map_or(DEFAULT_WATCH_TIMEOUT, Duration::from_secs);
    let params = WatchParams {
        filter,
        since,
        bookmarks: call.query.flag("allowWatchBookmarks"),
        send_initial_events,
        timeout,
        meta_only: call.meta_only,
    };
    let stream = watch::open(shared.clone(), &info, params, call.resource.clone());
    Ok(stream_response(stream))
}

/// A watch that fails at once with an ERROR event, as upstream reports 410 on a watch.
fn expired_watch(shared: Arc<Shared>, call: &Call, err: ApiError) -> Response<FakeBody> {
    let resource = call.resource.clone();
    let line = futures::stream::once(async move {
        let event = serde_json::json!({ "type": "ERROR", "object": err.to_status() });
        let mut bytes = serde_json::to_vec(&event).unwrap_or_default();
        bytes.push(b'\n');
        lock(&shared.stats)
            .entry(Verb::Watch, &resource)
            .response_bytes += bytes.len() as u64;
        Bytes::from(bytes)
    });
    stream_response(line)
}

fn stream_response(
    stream: impl futures::Stream<Item = Bytes> + Send + 'static,
) -> Response<FakeBody> {
    let body = StreamBody::new(stream.map(|b| Ok::<_, Infallible>(Frame::data(b))));
    let mut resp = Response::new(body.boxed_unsync());
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}
