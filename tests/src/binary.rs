//! The `svcplane` binary as shipped, started as a separate process by the e2e suites.
//!
//! A behaviour is proven when the binary does it against a real API server, so the
//! suites that check user-visible behaviour start `target/<profile>/svcplane` (built by
//! `cargo test --workspace --all-targets` beside the test binaries) rather than calling
//! library functions. A missing binary skips the test ([`crate::skip::skip`]) outside
//! CI and fails it under `CI=true`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `svcplane` binary next to the running test binary
/// (`target/<profile>/deps/<test>-<hash>` → `target/<profile>/svcplane`).
pub fn svcplane_bin() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("svcplane");
    bin.is_file().then_some(bin)
}

/// [`svcplane_bin`], or `None` after skipping the test ([`crate::skip::skip`]; a
/// failure under `CI=true`, where a missing binary is an error).
pub fn svcplane_bin_or_skip(test: &str) -> Option<PathBuf> {
    let bin = svcplane_bin();
    if bin.is_none() {
        crate::skip::skip(
            test,
            &crate::skip::Skip::missing(
                "the svcplane binary is not built next to the tests",
                "run the tests with `scripts/test` (or `cargo test --workspace --all-targets`), which builds it",
            ),
        );
    }
    bin
}

/// A free loopback port (bound and released; good enough for tests on one machine).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// A running `svcplane` process; killed when dropped.
#[derive(Debug)]
pub struct SvcplaneProcess {
    child: Child,
    /// A name for messages (and `POD_NAME`).
    pub name: String,
    /// The admin address (`--metrics-bind-address`) when the caller set one.
    pub admin: Option<SocketAddr>,
}

impl SvcplaneProcess {
    /// Start `bin` with `args`, `POD_NAME=name`, logs to this process' stderr.
    pub fn spawn(bin: &Path, name: &str, args: &[String], admin: Option<SocketAddr>) -> Self {
        Self::spawn_with_stderr(bin, name, args, admin, Stdio::inherit())
    }

    /// As [`Self::spawn`], with stderr sent where the caller says.
    pub fn spawn_with_stderr(
        bin: &Path,
        name: &str,
        args: &[String],
        admin: Option<SocketAddr>,
        stderr: Stdio,
    ) -> Self {
        let child = Command::new(bin)
            .args(args)
            .env("POD_NAME", name)
            .env(
                "RUST_LOG",
                std::env::var("SVCPLANE_E2E_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        Self {
            child,
            name: name.to_owned(),
            admin,
        }
    }

    /// Send a signal (`TERM`, `KILL`).
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{sig} {}", self.name);
    }

    /// Waits up to `limit` for the process to exit; its exit code.
    pub fn wait(&mut self, limit: Duration) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s.code();
            }
            if start.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Has the process exited?
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// GET `path` on the admin address: (status, body).
    pub fn admin_get(&self, path: &str) -> std::io::Result<(u16, String)> {
        let addr = self
            .admin
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no admin address"))?;
        http_get(addr, path)
    }

    /// Waits up to `limit` for `/readyz` to answer 200.
    pub async fn wait_ready(&mut self, limit: Duration) {
        let start = Instant::now();
        loop {
            assert!(!self.exited(), "{} exited before it was ready", self.name);
            if matches!(self.admin_get("/readyz"), Ok((200, _))) {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "{} not ready after {limit:?}: {:?}",
                self.name,
                self.admin_get("/readyz")
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The value of the sample `series` (name with labels, as exposed) on `/metrics`.
    pub fn metric(&self, series: &str) -> Option<f64> {
        let (_, body) = self.admin_get("/metrics").ok()?;
        sample(&body, series)
    }
}

impl Drop for SvcplaneProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The holder of the `svcplane` Lease in `ns` (`None` while nobody holds it).
pub async fn lease_holder(client: &kube::Client, ns: &str) -> Option<String> {
    kube::Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), ns)
        .get_opt("svcplane")
        .await
        .unwrap_or_else(|e| panic!("reading the Lease in {ns}: {e}"))
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

/// One `svcplane run` (controllers only: no webhook, no leader election) per test
/// binary and cluster, shared by the tests of that binary. It is started under a small
/// shell that kills it when the test binary exits (the shell waits for its stdin, a
/// pipe only the test binary holds), so no controller outlives the tests.
#[derive(Debug)]
pub struct SharedRun {
    /// The admin address (`/metrics`, `/readyz`).
    pub admin: SocketAddr,
    _tie: std::sync::Mutex<(std::process::ChildStdin, Child)>,
}

impl SharedRun {
    /// Starts `svcplane run` against `kubeconfig` with `extra` flags and waits until it
    /// is ready.
    pub fn start(bin: &Path, kubeconfig: &Path, extra: &[&str]) -> Self {
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port())
            .parse()
            .unwrap_or_else(|e| panic!("admin address: {e}"));
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#""$0" "$@" </dev/null & child=$!; cat >/dev/null; kill $child; wait $child"#)
            .arg(bin)
            .args([
                "run",
                "--webhook=false",
                "--leader-elect=false",
                &format!("--kubeconfig={}", kubeconfig.display()),
                &format!("--metrics-bind-address={admin}"),
            ])
            .args(extra)
            .env(
                "RUST_LOG",
                std::env::var("SVCPLANE_E2E_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let stdin = child
            .stdin
            .take()
            .unwrap_or_else(|| panic!("no stdin pipe to the svcplane run wrapper"));
        let start = Instant::now();
        while !matches!(http_get(admin, "/readyz"), Ok((200, _))) {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "svcplane run never became ready"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Self {
            admin,
            _tie: std::sync::Mutex::new((stdin, child)),
        }
    }

    /// The whole `/metrics` text (empty when it cannot be read).
    pub fn metrics_text(&self) -> String {
        http_get(self.admin, "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// The value of the sample `series` on `/metrics` (0 when absent).
    pub fn metric(&self, series: &str) -> f64 {
        sample(&self.metrics_text(), series).unwrap_or(0.0)
    }

    /// Writes the controllers made so far.
    pub fn writes(&self) -> WriteCounts {
        let n = |verb: &str, resource: &str| {
            self.metric(&format!(
                "svcplane_api_writes_total{{verb=\"{verb}\",resource=\"{resource}\"}}"
            )) as u64
        };
        (
            n("create", "endpointslices"),
            n("update", "endpointslices"),
            n("delete", "endpointslices"),
            n("create", "endpoints") + n("update", "endpoints") + n("delete", "endpoints"),
        )
    }
}

/// Controller writes: (EndpointSlice creates, updates, deletes, Endpoints writes).
pub type WriteCounts = (u64, u64, u64, u64);

/// A minimal HTTP/1.0 GET (the admin server is plain HTTP on loopback).
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// GET `path` over HTTPS on `addr`, accepting any certificate (a secure metrics port's
/// is self-signed), with `token` as the bearer token when given: (status, body).
pub async fn https_get(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    use http_body_util::BodyExt;
    let mut config = kube::Config::new(format!("https://{addr}").parse()?);
    config.accept_invalid_certs = true;
    let client = kube::Client::try_from(config)?;
    let mut request = http::Request::get(path);
    if let Some(t) = token {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let response = client
        .send(request.body(kube::client::Body::empty())?)
        .await?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// The value of the sample `series` (name with labels, as exposed) in a `/metrics` text.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}
