//! The webhook server over real HTTPS on 127.0.0.1, with rcgen-made certificates laid out
//! like a Secret volume (a `..data` symlink swapped on update) and a stand-in handler.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Body, Frame};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use serde_json::Value;
use svcplane_webhook::handler::{AdmissionHandler, Answer, Endpoint, MAX_BODY_BYTES};
use svcplane_webhook::server::{self, Running, ServerConfig, ServerError};
use svcplane_webhook::tls::TlsError;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

type Error = Box<dyn std::error::Error + Send + Sync>;

// ---------------------------------------------------------------- certificates

struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A serving certificate and its key, both PEM.
    fn issue(&self, sans: &[&str]) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let sans: Vec<String> = sans.iter().map(|s| (*s).to_owned()).collect();
        let cert = CertificateParams::new(sans)
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A directory laid out as kubelet lays out a Secret volume: `tls.crt -> ..data/tls.crt`,
/// `..data -> ..<generation>`, and an update swaps `..data` by rename.
struct SecretVolume {
    dir: PathBuf,
    generation: usize,
}

impl SecretVolume {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "svcplane-https-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(Path::new("..data").join(name), dir.join(name)).unwrap();
        }
        Self { dir, generation: 0 }
    }

    fn publish(&mut self, cert: &str, key: &str) {
        self.generation += 1;
        let generation = format!("..gen-{}", self.generation);
        std::fs::create_dir(self.dir.join(&generation)).unwrap();
        std::fs::write(self.dir.join(&generation).join("tls.crt"), cert).unwrap();
        std::fs::write(self.dir.join(&generation).join("tls.key"), key).unwrap();
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&generation, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
    }

    fn cert_path(&self) -> PathBuf {
        self.dir.join("tls.crt")
    }

    fn key_path(&self) -> PathBuf {
        self.dir.join("tls.key")
    }
}

impl Drop for SecretVolume {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A CA, a serving certificate for `sans` signed by it, written to a fresh Secret-like
/// volume.
fn certs(sans: &[&str]) -> (Ca, SecretVolume) {
    let ca = Ca::new("svcplane test CA");
    let (cert, key) = ca.issue(sans);
    let mut volume = SecretVolume::new();
    volume.publish(&cert, &key);
    (ca, volume)
}

// ---------------------------------------------------------------- client

/// A TLS client trusting only `ca_pem`.
fn tls_client(ca_pem: &str) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
}

/// One keep-alive HTTP/1.1 connection over TLS.
async fn connect<B>(addr: SocketAddr, tls: &TlsConnector) -> Result<SendRequest<B>, Error>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Error>,
{
    let tcp = TcpStream::connect(addr).await?;
    let stream = tls.connect(ServerName::try_from("localhost")?, tcp).await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

async fn send<B>(sender: &mut SendRequest<B>, method: Method, path: &str, body: B) -> Reply
where
    B: Body + Send + 'static,
{
    sender.ready().await.unwrap();
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "localhost")
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .unwrap();
    let res = sender.send_request(req).await.unwrap();
    let (parts, body) = res.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

fn full(body: impl Into<Bytes>) -> Full<Bytes> {
    Full::new(body.into())
}

/// A fresh connection and one request on it.
async fn request(addr: SocketAddr, ca: &Ca, method: Method, path: &str, body: &[u8]) -> Reply {
    let mut sender = connect(addr, &tls_client(&ca.pem)).await.unwrap();
    send(&mut sender, method, path, full(body.to_vec())).await
}

// ---------------------------------------------------------------- server

/// Echoes the endpoint and the body length; readiness is a switch; `delay` makes it slow.
#[derive(Default)]
struct Stub {
    ready: AtomicBool,
    delay: Duration,
}

impl AdmissionHandler for Stub {
    async fn handle(&self, endpoint: Endpoint, body: Bytes) -> Answer {
        tokio::time::sleep(self.delay).await;
        let body = serde_json::json!({ "endpoint": endpoint.label(), "bytes": body.len() });
        Answer {
            status: 200,
            body: serde_json::to_vec(&body).unwrap(),
        }
    }

    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

fn config(volume: &SecretVolume) -> ServerConfig {
    ServerConfig {
        bind_address: "127.0.0.1:0".parse().unwrap(),
        reload_interval: Duration::from_millis(100),
        drain: Duration::from_millis(100),
        ..ServerConfig::new(volume.cert_path(), volume.key_path())
    }
}

async fn start(handler: Arc<Stub>, config: ServerConfig) -> (Running, CancellationToken) {
    let shutdown = CancellationToken::new();
    let running = server::bind(handler, config, shutdown.clone())
        .await
        .unwrap();
    (running, shutdown)
}

/// Poll `done` every 20 ms for up to 5 s.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    for _ in 0..250 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn webhook_routes_answer_with_the_handlers_json() {
    let (ca, volume) = certs(&["localhost"]);
    let (running, _stop) = start(Arc::default(), config(&volume)).await;
    let mut conn = connect(running.local_addr, &tls_client(&ca.pem))
        .await
        .unwrap();
    // Both on one keep-alive connection, as kube-apiserver does.
    for (path, label) in [
        ("/mutate-services", "mutate"),
        ("/validate-services", "validate"),
    ] {
        let reply = send(&mut conn, Method::POST, path, full(&b"{\"x\":1}"[..])).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.headers[header::CONTENT_TYPE], "application/json");
        assert_eq!(
            reply.json(),
            serde_json::json!({ "endpoint": label, "bytes": 7 })
        );
    }
}

#[tokio::test]
async fn healthz_always_and_readyz_once_the_handler_is_ready() {
    let (ca, volume) = certs(&["localhost"]);
    let handler = Arc::new(Stub::default());
    let (running, _stop) = start(handler.clone(), config(&volume)).await;
    let addr = running.local_addr;

    let health = request(addr, &ca, Method::GET, "/healthz", b"").await;
    assert_eq!(
        (health.status, health.body.as_str()),
        (StatusCode::OK, "ok")
    );

    let unready = request(addr, &ca, Method::GET, "/readyz", b"").await;
    assert_eq!(unready.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(unready.body, "not ready: admission state not synced yet");
    assert!(running.certs().is_loaded());

    handler.ready.store(true, Ordering::Relaxed);
    let ready = request(addr, &ca, Method::GET, "/readyz", b"").await;
    assert_eq!((ready.status, ready.body.as_str()), (StatusCode::OK, "ok"));
}

#[tokio::test]
async fn body_limit() {
    let (ca, volume) = certs(&["localhost"]);
    let (running, _stop) = start(Arc::default(), config(&volume)).await;
    let addr = running.local_addr;

    let at_limit = request(
        addr,
        &ca,
        Method::POST,
        "/validate-services",
        &vec![b' '; MAX_BODY_BYTES],
    )
    .await;
    assert_eq!(at_limit.status, StatusCode::OK);
    assert_eq!(at_limit.json()["bytes"], MAX_BODY_BYTES);

    let over = request(
        addr,
        &ca,
        Method::POST,
        "/mutate-services",
        &vec![b' '; MAX_BODY_BYTES + 1],
    )
    .await;
    assert_eq!(over.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(over.headers[header::CONTENT_TYPE], "application/json");
    assert_eq!(
        over.json(),
        serde_json::json!({"error": "request body of 3145729 bytes exceeds the 3145728-byte limit"})
    );

    // Chunked: no length announced, so the limit bites while reading.
    let chunks = (0..4).map(|_| Ok::<_, Infallible>(Frame::data(Bytes::from(vec![b' '; 1 << 20]))));
    let streaming = StreamBody::new(futures::stream::iter(chunks));
    let mut conn = connect(addr, &tls_client(&ca.pem)).await.unwrap();
    let over = send(&mut conn, Method::POST, "/validate-services", streaming).await;
    assert_eq!(over.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        over.json(),
        serde_json::json!({"error": "request body exceeds the 3145728-byte limit"})
    );
}

#[tokio::test]
async fn unknown_paths_and_wrong_methods_get_json_errors() {
    let (ca, volume) = certs(&["localhost"]);
    let (running, _stop) = start(Arc::default(), config(&volume)).await;
    let addr = running.local_addr;

    let missing = request(addr, &ca, Method::POST, "/mutate", b"{}").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.headers[header::CONTENT_TYPE], "application/json");
    assert!(
        missing.json()["error"]
            .as_str()
            .unwrap()
            .starts_with("no such path")
    );

    let get = request(addr, &ca, Method::GET, "/validate-services", b"").await;
    assert_eq!(get.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(get.headers[header::ALLOW], "POST");
    assert_eq!(
        get.json()["error"],
        "method GET is not allowed here; use POST"
    );

    let post = request(addr, &ca, Method::POST, "/healthz", b"").await;
    assert_eq!(post.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(
        post.json()["error"],
        "method POST is not allowed here; use GET"
    );
}

#[tokio::test]
async fn a_slow_handler_gets_504_at_the_deadline() {
    let (ca, volume) = certs(&["localhost"]);
    let handler = Arc::new(Stub {
        delay: Duration::from_secs(3),
        ..Stub::default()
    });
    let config = ServerConfig {
        request_timeout: Duration::from_millis(200),
        ..config(&volume)
    };
    let (running, _stop) = start(handler, config).await;
    let started = std::time::Instant::now();
    let reply = request(
        running.local_addr,
        &ca,
        Method::POST,
        "/mutate-services",
        b"{}",
    )
    .await;
    assert_eq!(reply.status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(
        reply.json(),
        serde_json::json!({"error": "the admission request was not answered within 200ms"})
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_rotated_certificate_is_served_after_the_next_poll() {
    let (old_ca, mut volume) = certs(&["localhost"]);
    let (running, _stop) = start(Arc::default(), config(&volume)).await;
    let addr = running.local_addr;
    assert_eq!(
        request(addr, &old_ca, Method::GET, "/healthz", b"")
            .await
            .status,
        StatusCode::OK
    );

    let new_ca = Ca::new("svcplane rotated CA");
    let (cert, key) = new_ca.issue(&["localhost"]);
    volume.publish(&cert, &key);
    let certs = running.certs();
    eventually("the reload", || certs.reloads() == 1).await;

    assert_eq!(
        request(addr, &new_ca, Method::GET, "/healthz", b"")
            .await
            .status,
        StatusCode::OK
    );
    let refused = connect::<Full<Bytes>>(addr, &tls_client(&old_ca.pem)).await;
    let message = refused.err().unwrap().to_string();
    assert!(message.contains("UnknownIssuer"), "{message}");
    assert_eq!(certs.failed_reloads(), 0);
}

#[tokio::test]
async fn a_broken_update_keeps_the_old_certificate() {
    let (ca, mut volume) = certs(&["localhost"]);
    let handler = Arc::new(Stub::default());
    handler.ready.store(true, Ordering::Relaxed);
    let (running, _stop) = start(handler, config(&volume)).await;
    let addr = running.local_addr;

    // A truncated certificate, then a certificate whose key is someone else's.
    let (cert, key) = ca.issue(&["localhost"]);
    volume.publish(&cert[..cert.len() / 2], &key);
    let certs = running.certs();
    eventually("the first rejection", || certs.failed_reloads() == 1).await;
    let (_, other_key) = ca.issue(&["localhost"]);
    volume.publish(&cert, &other_key);
    eventually("the second rejection", || certs.failed_reloads() == 2).await;

    // A broken pair is counted once, not at every poll.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!((certs.reloads(), certs.failed_reloads()), (0, 2));
    let ready = request(addr, &ca, Method::GET, "/readyz", b"").await;
    assert_eq!(ready.status, StatusCode::OK);

    // Fixing the files is picked up as usual.
    let (cert, key) = ca.issue(&["localhost"]);
    volume.publish(&cert, &key);
    eventually("the reload", || certs.reloads() == 1).await;
    assert_eq!(
        request(addr, &ca, Method::GET, "/healthz", b"")
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn shutdown_drains_then_finishes_requests_in_flight() {
    let (ca, volume) = certs(&["localhost"]);
    let handler = Arc::new(Stub {
        delay: Duration::from_millis(600),
        ..Stub::default()
    });
    handler.ready.store(true, Ordering::Relaxed);
    let config = ServerConfig {
        drain: Duration::from_millis(300),
        ..config(&volume)
    };
    let (running, stop) = start(handler, config).await;
    let addr = running.local_addr;
    let tls = tls_client(&ca.pem);

    let mut conn = connect(addr, &tls).await.unwrap();
    let in_flight = tokio::spawn(async move {
        send(
            &mut conn,
            Method::POST,
            "/validate-services",
            full(&b"{}"[..]),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.cancel();

    // During the drain new connections are still answered, but readiness is gone.
    let readyz = request(addr, &ca, Method::GET, "/readyz", b"").await;
    assert_eq!(readyz.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(readyz.body, "not ready: shutting down");

    // The request accepted before shutdown completes (and tells its client to go).
    let reply = in_flight.await.unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.headers[header::CONNECTION], "close");

    tokio::time::timeout(Duration::from_secs(3), running.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(connect::<Full<Bytes>>(addr, &tls).await.is_err());
}

#[tokio::test]
async fn startup_fails_on_missing_certificate_files() {
    let volume = SecretVolume::new(); // symlinks into an empty `..data`
    let err = server::bind(
        Arc::new(Stub::default()),
        config(&volume),
        CancellationToken::new(),
    )
    .await
    .unwrap_err();
    let ServerError::Tls(TlsError::Missing { path, .. }) = &err else {
        panic!("unexpected error: {err:?}");
    };
    assert_eq!(path, &volume.cert_path());
}

// ---------------------------------------------------------------- the real handler

mod real_handler {
    use std::sync::Mutex;

    use base64::Engine;
    use serde_json::json;
    use svcplane_allocator::{AllocatorConfig, Claim};
    use svcplane_webhook::claim::AllocationClaim;
    use svcplane_webhook::shell::holders::SourceKind;
    use svcplane_webhook::shell::watch::Readiness;
    use svcplane_webhook::shell::{ClaimError, ClaimStore, Claimed, Webhook};
    use svcplane_webhook::state::{AllocationState, HolderKey, ServiceRef};

    use super::*;

    /// Claims kept in memory: create-if-absent on the claim name.
    #[derive(Default)]
    struct MemoryClaims(Mutex<Vec<AllocationClaim>>);

    impl ClaimStore for MemoryClaims {
        async fn claim(&self, claim: AllocationClaim) -> Result<Claimed, ClaimError> {
            let mut all = self.0.lock().unwrap();
            if let Some(existing) = all.iter().find(|c| c.metadata.name == claim.metadata.name) {
                return Ok(Claimed::Taken(Box::new(existing.clone())));
            }
            all.push(claim.clone());
            Ok(Claimed::Won(Box::new(claim)))
        }

        async fn release(&self, claim: &AllocationClaim) {
            self.0
                .lock()
                .unwrap()
                .retain(|c| c.metadata.name != claim.metadata.name);
        }
    }

    fn webhook() -> Arc<Webhook<MemoryClaims>> {
        let allocators = AllocatorConfig::from_flags("10.96.0.0/24", "30000-30099")
            .unwrap()
            .allocators(3)
            .unwrap();
        let mut state = AllocationState::new(allocators);
        // A stored Service already holds 10.96.0.50.
        state.set(
            HolderKey::Service {
                namespace: "shop".into(),
                name: "db".into(),
            },
            Some(ServiceRef::named("shop", "db")),
            vec![Claim::Ip("10.96.0.50".parse().unwrap())],
        );
        let readiness = Arc::new(Readiness::default());
        for kind in [
            SourceKind::Services,
            SourceKind::Claims,
            SourceKind::IpAddresses,
        ] {
            readiness.listed(kind);
        }
        Arc::new(Webhook::new(
            Arc::new(Mutex::new(state)),
            MemoryClaims::default(),
            readiness,
            Default::default(),
        ))
    }

    fn review(uid: &str, resource: &str, object: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "", "version": "v1", "kind": "Service"},
                "resource": {"group": "", "version": "v1", "resource": resource},
                "name": object["metadata"]["name"],
                "namespace": "shop",
                "operation": "CREATE",
                "userInfo": {"username": "alice"},
                "object": object,
                "dryRun": false,
            }
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn admission_reviews_over_https_get_patches_and_upstream_statuses() {
        let (ca, volume) = certs(&["localhost"]);
        let shutdown = CancellationToken::new();
        let running = server::bind(webhook(), config(&volume), shutdown.clone())
            .await
            .unwrap();
        let addr = running.local_addr;

        // A NodePort Service without values: the patch, applied to the object, gives
        // it a ClusterIP and a nodePort from the configured ranges and leaves the rest.
        let object = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {
                "type": "NodePort", "selector": {"app": "web"},
                "sessionAffinity": "None", "externalTrafficPolicy": "Cluster",
                "internalTrafficPolicy": "Cluster",
                "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
                "aFieldFromTheFuture": {"kept": true}
            }
        });
        let reply = request(
            addr,
            &ca,
            Method::POST,
            "/mutate-services",
            &review("u-1", "services", object.clone()),
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK);
        let response = reply.json()["response"].clone();
        assert_eq!(response["uid"], "u-1");
        assert_eq!(response["allowed"], true);
        assert_eq!(response["patchType"], "JSONPatch");
        let ops: json_patch::Patch = serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD
                .decode(response["patch"].as_str().unwrap())
                .unwrap(),
        )
        .unwrap();
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &ops).unwrap();
        let spec = &patched["spec"];
        let ip: std::net::Ipv4Addr = spec["clusterIP"].as_str().unwrap().parse().unwrap();
        assert_eq!(ip.octets()[..3], [10, 96, 0]);
        assert_ne!(ip.to_string(), "10.96.0.50", "held by another Service");
        assert_eq!(spec["clusterIPs"], json!([ip.to_string()]));
        assert_eq!(spec["ipFamilies"], json!(["IPv4"]));
        assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
        let port = spec["ports"][0]["nodePort"].as_i64().unwrap();
        assert!((30000..=30099).contains(&port), "{port}");
        let mut rest = patched.clone();
        for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            rest["spec"].as_object_mut().unwrap().remove(f);
        }
        rest["spec"]["ports"][0]
            .as_object_mut()
            .unwrap()
            .remove("nodePort");
        assert_eq!(rest, object, "nothing else changed");

        // Validation of a Service asking for a taken address: upstream's 422.
        let taken = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "api", "namespace": "shop"},
            "spec": {
                "type": "ClusterIP", "clusterIP": "10.96.0.50", "clusterIPs": ["10.96.0.50"],
                "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                "sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
                "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}]
            }
        });
        let reply = request(
            addr,
            &ca,
            Method::POST,
            "/validate-services",
            &review("u-2", "services", taken),
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK);
        let response = reply.json()["response"].clone();
        assert_eq!(response["allowed"], false);
        assert!(response.get("patch").is_none());
        let status = &response["status"];
        assert_eq!(status["code"], 422);
        assert_eq!(status["reason"], "Invalid");
        assert_eq!(
            status["message"],
            "Service \"api\" is invalid: spec.clusterIPs: Invalid value: [\"10.96.0.50\"]: failed to allocate IP 10.96.0.50: provided IP is already allocated"
        );
        assert_eq!(status["details"]["kind"], "Service");
        assert_eq!(status["details"]["causes"][0]["field"], "spec.clusterIPs");
        assert_eq!(
            status["details"]["causes"][0]["reason"],
            "FieldValueInvalid"
        );

        // Not a Service: allowed unchanged. Not JSON: 400 naming the problem.
        let reply = request(
            addr,
            &ca,
            Method::POST,
            "/validate-services",
            &review("u-3", "configmaps", json!({"metadata": {"name": "x"}})),
        )
        .await;
        assert_eq!(reply.json()["response"]["allowed"], true);
        let reply = request(
            addr,
            &ca,
            Method::POST,
            "/mutate-services",
            b"{\"apiVersion\": ",
        )
        .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        let error = reply.json()["error"].as_str().unwrap().to_owned();
        assert!(
            error.starts_with("truncated AdmissionReview body"),
            "{error}"
        );
        let reply = request(
            addr,
            &ca,
            Method::POST,
            "/mutate-services",
            b"not json at all",
        )
        .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        let error = reply.json()["error"].as_str().unwrap().to_owned();
        assert!(error.contains("JSON"), "{error}");

        shutdown.cancel();
        running.wait().await.unwrap();
    }
}
