//! Per-client request accounting, and the time the fake spends serving each client.
//!
//! `FakeApi::stats()` counts every request the fake serves, whoever sent it. The
//! simulator has two clients besides the trace driver's direct writes: the controllers'
//! (rate-limited) and the observer's (an EndpointSlice watch timing every write). The
//! tables show the controllers' share as `fake.stats()` minus what [`CountLayer`] saw on
//! the observer's client; a [`CountLayer`] on the controllers' client counts the same
//! thing from the other side, and the two must agree (the small-scale test checks it).
//!
//! The layer also times the fake's own work for the client (handling each request and
//! encoding each watch line), so the CPU figure can be split between the fake API server
//! (it lives in the same process) and the runtime.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};

use crate::fake_api::{Counter, FakeBody, FakeService, Stats, Verb};

/// Counters of one client.
#[derive(Debug, Default)]
pub struct Traffic {
    by_call: Mutex<BTreeMap<(Verb, String), Counter>>,
    fake_nanos: AtomicU64,
}

impl Traffic {
    fn with<R>(&self, verb: Verb, resource: &str, f: impl FnOnce(&mut Counter) -> R) -> R {
        let mut map = self.by_call.lock().unwrap_or_else(PoisonError::into_inner);
        f(map.entry((verb, resource.to_owned())).or_default())
    }

    fn add_fake_time(&self, d: Duration) {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.fake_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// What this client sent and received so far, in the fake's format.
    pub fn stats(&self) -> Stats {
        Stats {
            by_call: self
                .by_call
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }

    /// Time the fake spent serving this client (request handling and watch encoding).
    pub fn fake_time(&self) -> Duration {
        Duration::from_nanos(self.fake_nanos.load(Ordering::Relaxed))
    }

    /// Zeroes everything (after a trace's setup).
    pub fn reset(&self) {
        self.by_call
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.fake_nanos.store(0, Ordering::Relaxed);
    }
}

/// `a - b` per counter (saturating; entries that end at zero are dropped).
pub fn subtract(a: &Stats, b: &Stats) -> Stats {
    let mut out = Stats::default();
    for (k, c) in &a.by_call {
        let o = b.by_call.get(k).copied().unwrap_or_default();
        let d = Counter {
            requests: c.requests.saturating_sub(o.requests),
            errors: c.errors.saturating_sub(o.errors),
            dry_run: c.dry_run.saturating_sub(o.dry_run),
            request_bytes: c.request_bytes.saturating_sub(o.request_bytes),
            response_bytes: c.response_bytes.saturating_sub(o.response_bytes),
        };
        if d != Counter::default() {
            out.by_call.insert(k.clone(), d);
        }
    }
    out
}

/// A tower layer over the fake's service that counts into a [`Traffic`].
#[derive(Debug, Clone)]
pub struct CountLayer(pub Arc<Traffic>);

impl tower::Layer<FakeService> for CountLayer {
    type Service = Counted;

    fn layer(&self, inner: FakeService) -> Counted {
        Counted {
            inner,
            traffic: self.0.clone(),
        }
    }
}

/// The fake's service, counted.
#[derive(Debug, Clone)]
pub struct Counted {
    inner: FakeService,
    traffic: Arc<Traffic>,
}

/// Verb and resource (`plural` or `plural/subresource`) of a request, as the fake
/// classifies it; `None` for paths outside the resource API (`/version`).
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> Option<(Verb, String)> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return None,
    };
    let rest = match rest {
        // `namespaces/<ns>/<plural>/...`; `namespaces/<name>` is the Namespace itself.
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (plural, name, sub) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(*name), None),
        [plural, name, sub, ..] => (*plural, Some(*name), Some(*sub)),
        [] => return None,
    };
    let watch = query.is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let verb = match *method {
        Method::GET if name.is_some() => Verb::Get,
        Method::GET if watch => Verb::Watch,
        Method::GET => Verb::List,
        Method::POST => Verb::Create,
        Method::PUT => Verb::Update,
        Method::PATCH => Verb::Patch,
        Method::DELETE => Verb::Delete,
        _ => return None,
    };
    let resource = match sub {
        Some(s) => format!("{plural}/{s}"),
        None => plural.to_owned(),
    };
    Some((verb, resource))
}

impl tower::Service<Request<kube::client::Body>> for Counted {
    type Response = Response<FakeBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<FakeBody>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<kube::client::Body>) -> Self::Future {
        let key = classify(req.method(), req.uri().path(), req.uri().query());
        let request_bytes = req.body().size_hint().exact().unwrap_or(0);
        let traffic = self.traffic.clone();
        let mut fut = tower::Service::call(&mut self.inner, req);
        Box::pin(async move {
            let resp = futures::future::poll_fn(|cx| {
                let start = std::time::Instant::now();
                let r = fut.as_mut().poll(cx);
                traffic.add_fake_time(start.elapsed());
                r
            })
            .await?;
            let Some((verb, resource)) = key else {
                return Ok(resp);
            };
            traffic.with(verb, &resource, |c| {
                c.requests += 1;
                c.errors += u64::from(resp.status().as_u16() >= 400);
                c.request_bytes += request_bytes;
            });
            let (parts, body) = resp.into_parts();
            let body = CountedBody {
                inner: body,
                traffic,
                verb,
                resource,
            };
            Ok(Response::from_parts(parts, body.boxed_unsync()))
        })
    }
}

/// A response body that counts its bytes and times the fake's encoding of them.
struct CountedBody {
    inner: FakeBody,
    traffic: Arc<Traffic>,
    verb: Verb,
    resource: String,
}

impl Body for CountedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        let start = std::time::Instant::now();
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        this.traffic.add_fake_time(start.elapsed());
        if let Poll::Ready(Some(Ok(frame))) = &r
            && let Some(data) = frame.data_ref()
        {
            let n = data.len() as u64;
            this.traffic
                .with(this.verb, &this.resource, |c| c.response_bytes += n);
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_like_the_fake() {
        let get = |p: &str, q: Option<&str>| classify(&Method::GET, p, q);
        assert_eq!(get("/api/v1/pods", None), Some((Verb::List, "pods".into())));
        assert_eq!(
            get("/api/v1/pods", Some("watch=true&resourceVersion=5")),
            Some((Verb::Watch, "pods".into()))
        );
        assert_eq!(
            get("/api/v1/namespaces/default", None),
            Some((Verb::Get, "namespaces".into()))
        );
        assert_eq!(
            classify(
                &Method::PUT,
                "/apis/discovery.k8s.io/v1/namespaces/a/endpointslices/s-1",
                None
            ),
            Some((Verb::Update, "endpointslices".into()))
        );
        assert_eq!(
            classify(&Method::PUT, "/api/v1/namespaces/a/services/x/status", None),
            Some((Verb::Update, "services/status".into()))
        );
        assert_eq!(
            classify(
                &Method::POST,
                "/apis/events.k8s.io/v1/namespaces/a/events",
                None
            ),
            Some((Verb::Create, "events".into()))
        );
        assert_eq!(get("/version", None), None);
    }
}
