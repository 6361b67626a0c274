//! Loopback HTTPS load run of the webhook server (issue 7's "does the server keep up").
//!
//! The `review` bench measures the handler in-process; this one measures what the API
//! server sees: TLS, HTTP/1.1 keep-alive, routing, the body limit, the deadline and the
//! handler together. It drives `--requests N` requests at `--rate R` per second from
//! `--connections K` keep-alive connections, open loop: request *i* is due at
//! `start + i/R` whether or not earlier ones have finished, and its latency counts from
//! that due time, so a stall shows up in every request it delays (no coordinated
//! omission). Tokio timers have 1 ms resolution, so requests are released up to 1 ms
//! early and then count from when they left; a request that leaves late still counts
//! from its due time. The "from send" rows count from when each request left, which
//! leaves out queueing behind a slow predecessor on the same connection.
//!
//! `cargo bench -p svcplane-tests --bench load [-- --requests 60000 --rate 1000 --connections 8]`
//!
//! Under `cargo test` (no `--bench` argument) it does a 200-request smoke run.

#![allow(clippy::print_stdout, clippy::expect_used, clippy::unwrap_used)] // bench: printing is its output; a panic is a broken fixture

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::RootCertStore;
use rustls::pki_types::ServerName;
use serde_json::json;
use svcplane_webhook::handler::Endpoint;
use svcplane_webhook::server::{self, ServerConfig};
use svcplane_webhook::shell::Webhook;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

#[path = "support/mod.rs"]
mod support;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The resolution of tokio's timer wheel.
const TIMER_TICK: Duration = Duration::from_millis(1);

// ==================================================================================
// The handler under load and the bodies it gets.

/// The real webhook over an allocation state holding 10 000 Services.
fn make_handler() -> Arc<Webhook<support::CountingClaims>> {
    Arc::new(support::webhook(support::held_state()))
}

/// The body every request to `endpoint` posts: an AdmissionReview for a NodePort
/// Service CREATE as kubectl sends it. Validation sees it allocated (as the API server
/// sends it by then); mutation gets it unallocated, as a dry run, so every request
/// does the full allocation and the state stays the same from one request to the next.
fn review_body(endpoint: Endpoint) -> Vec<u8> {
    let mut spec = json!({
        "type": "NodePort",
        "selector": {"app": "web"},
        "ports": [
            {"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080},
            {"name": "https", "protocol": "TCP", "port": 443, "targetPort": 8443}
        ],
        "sessionAffinity": "None",
        "externalTrafficPolicy": "Cluster",
        "internalTrafficPolicy": "Cluster"
    });
    let dry_run = endpoint == Endpoint::Mutate;
    if !dry_run {
        spec["clusterIP"] = json!("10.100.12.34");
        spec["clusterIPs"] = json!(["10.100.12.34"]);
        spec["ipFamilies"] = json!(["IPv4"]);
        spec["ipFamilyPolicy"] = json!("SingleStack");
        spec["ports"][0]["nodePort"] = json!(31234);
        spec["ports"][1]["nodePort"] = json!(31443);
    }
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0f6b6f5e-3f1c-4a53-9d0e-1b2c3d4e5f60",
            "kind": {"group": "", "version": "v1", "kind": "Service"},
            "resource": {"group": "", "version": "v1", "resource": "services"},
            "requestKind": {"group": "", "version": "v1", "kind": "Service"},
            "requestResource": {"group": "", "version": "v1", "resource": "services"},
            "name": "web",
            "namespace": "bench",
            "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": "web",
                    "namespace": "bench",
                    "labels": {"app.kubernetes.io/name": "web", "app.kubernetes.io/instance": "bench"},
                    "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"web\",\"namespace\":\"bench\"},\"spec\":{\"type\":\"NodePort\",\"selector\":{\"app\":\"web\"},\"ports\":[{\"name\":\"http\",\"port\":80,\"targetPort\":8080}]}}"},
                    "managedFields": [{
                        "manager": "kubectl-client-side-apply",
                        "operation": "Update",
                        "apiVersion": "v1",
                        "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:spec": {"f:ports": {}, "f:selector": {}, "f:type": {}}}
                    }]
                },
                "spec": spec,
                "status": {"loadBalancer": {}}
            },
            "oldObject": null,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions", "fieldManager": "kubectl-client-side-apply"}
        }
    }))
    .expect("the fixture encodes")
}

#[derive(Debug, Clone, Copy)]
struct Args {
    requests: usize,
    rate: f64,
    connections: usize,
}

fn parse_args() -> Args {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary
    // without it, and then only a smoke run keeps CI fast.
    let smoke = !argv.iter().any(|a| a == "--bench");
    let mut args = Args {
        requests: if smoke { 200 } else { 60_000 },
        rate: 1000.0,
        connections: 8,
    };
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_owned())),
            None => (arg.as_str(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next().cloned());
        match flag {
            "--requests" => {
                args.requests = value().and_then(|v| v.parse().ok()).expect("--requests N")
            }
            "--rate" => args.rate = value().and_then(|v| v.parse().ok()).expect("--rate R"),
            "--connections" => {
                args.connections = value()
                    .and_then(|v| v.parse().ok())
                    .expect("--connections K")
            }
            _ => {} // `--bench`, test filters and the like
        }
    }
    assert!(
        args.rate > 0.0 && args.connections > 0,
        "rate and connections must be positive"
    );
    args
}

/// A CA and a serving certificate for 127.0.0.1 in `dir`; returns the CA's DER.
fn write_certs(dir: &Path) -> rustls::pki_types::CertificateDer<'static> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    ca.der().clone()
}

fn tls_client(ca: rustls::pki_types::CertificateDer<'static>) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    roots.add(ca).unwrap();
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

async fn connect(
    addr: std::net::SocketAddr,
    tls: &TlsConnector,
) -> Result<SendRequest<Full<Bytes>>, Error> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let stream = tls.connect(ServerName::try_from("127.0.0.1")?, tcp).await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn post(
    sender: &mut SendRequest<Full<Bytes>>,
    path: &str,
    body: Bytes,
) -> Result<StatusCode, Error> {
    sender.ready().await?;
    let req = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::HOST, "127.0.0.1")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(body))?;
    let res = sender.send_request(req).await?;
    let status = res.status();
    res.into_body().collect().await?;
    Ok(status)
}

#[derive(Default)]
struct Samples {
    from_due: Vec<Duration>,
    from_send: Vec<Duration>,
    errors: usize,
    last_done: Option<Instant>,
}

/// One open-loop run against `endpoint`; connection k sends requests k, k+K, k+2K, …
async fn run(
    addr: std::net::SocketAddr,
    tls: &TlsConnector,
    endpoint: Endpoint,
    args: Args,
    body: Bytes,
) -> (Samples, Instant) {
    let mut senders = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        let mut sender = connect(addr, tls).await.expect("connect");
        // Warm the connection so the handshake is not in the first sample.
        post(&mut sender, endpoint.path(), body.clone())
            .await
            .expect("warm-up");
        senders.push(sender);
    }
    let start = Instant::now() + Duration::from_millis(20);
    let period = Duration::from_secs_f64(1.0 / args.rate);
    let workers: Vec<_> = senders
        .into_iter()
        .enumerate()
        .map(|(k, mut sender)| {
            let body = body.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                let mut s = Samples::default();
                for i in (k..args.requests).step_by(args.connections) {
                    let due = start + period.mul_f64(i as f64);
                    // Tokio timers fire on the next 1 ms tick or later, so aim a tick
                    // early; latency counts from the earlier of due and sent below.
                    tokio::time::sleep_until(due - TIMER_TICK).await;
                    let sent = Instant::now();
                    match post(&mut sender, endpoint.path(), body.clone()).await {
                        Ok(StatusCode::OK) => {}
                        Ok(_) => s.errors += 1,
                        Err(_) => {
                            s.errors += 1;
                            if let Ok(fresh) = connect(addr, &tls).await {
                                sender = fresh;
                            }
                        }
                    }
                    let done = Instant::now();
                    s.from_due.push(done - due.min(sent));
                    s.from_send.push(done - sent);
                    s.last_done = Some(done);
                }
                s
            })
        })
        .collect();
    let mut all = Samples::default();
    for w in workers {
        let s = w.await.expect("worker");
        all.from_due.extend(s.from_due);
        all.from_send.extend(s.from_send);
        all.errors += s.errors;
        all.last_done = all.last_done.max(s.last_done);
    }
    (all, start)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn main() -> Result<(), Error> {
    let args = parse_args();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let dir: PathBuf = std::env::temp_dir().join(format!("svcplane-load-{}", std::process::id()));
        let ca = write_certs(&dir);
        let shutdown = CancellationToken::new();
        let config = ServerConfig {
            bind_address: "127.0.0.1:0".parse()?,
            drain: Duration::ZERO,
            ..ServerConfig::new(dir.join("tls.crt"), dir.join("tls.key"))
        };
        let running = server::bind(make_handler(), config, shutdown.clone()).await?;
        let tls = tls_client(ca);

        println!(
            "webhook load: {} requests per endpoint at {} rps over {} keep-alive HTTPS connections, body {} bytes",
            args.requests,
            args.rate,
            args.connections,
            review_body(Endpoint::Validate).len()
        );
        println!(
            "{:<10} {:<11} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9}   (ms)",
            "endpoint", "latency", "rps", "errors", "p50", "p99", "p99.9", "max"
        );
        for endpoint in [Endpoint::Validate, Endpoint::Mutate] {
            let body = Bytes::from(review_body(endpoint));
            let claims_before = support::CLAIMS.load(Ordering::Relaxed);
            let (mut s, start) = run(running.local_addr, &tls, endpoint, args, body).await;
            let claims = support::CLAIMS.load(Ordering::Relaxed) - claims_before;
            let elapsed = s.last_done.map_or(Duration::ZERO, |d| d - start);
            let rps = s.from_due.len() as f64 / elapsed.as_secs_f64().max(f64::EPSILON);
            for (label, samples) in [("from due", &mut s.from_due), ("from send", &mut s.from_send)] {
                samples.sort_unstable();
                println!(
                    "{:<10} {:<11} {:>9.1} {:>7} {:>9} {:>9} {:>9} {:>9}",
                    endpoint.label(),
                    label,
                    rps,
                    s.errors,
                    ms(percentile(samples, 50.0)),
                    ms(percentile(samples, 99.0)),
                    ms(percentile(samples, 99.9)),
                    ms(samples.last().copied().unwrap_or_default()),
                );
            }
            println!("{:<10} claims (API writes) during the run: {claims}", endpoint.label());
            if endpoint == Endpoint::Validate {
                assert_eq!(claims, 0, "the validating path must not write to the API");
            }
        }
        shutdown.cancel();
        running.wait().await?;
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    })
}
