//! Starting the two controllers under comparison as processes of the bench's own.
//!
//! The bench starts each one itself, rather than letting the harness start upstream
//! kube-controller-manager, so it owns both PIDs (for `/proc` figures) and both start
//! at a moment it chooses (a true cold start, timed from the spawn). Upstream runs as
//! `<envtest-bin> kube-controller-manager ARGS...` with the arguments
//! `tests/envtest/main.go` gives it, limited to the three endpoint controllers; svcplane
//! as `svcplane run` with the same three and no webhook or leader election. Both get
//! the same `--kube-api-qps`/`--kube-api-burst`. Logs go to files in the run's work
//! directory.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::Side;
use crate::binary::{free_port, http_get};
use crate::envtest::Harness;

/// How long `svcplane run` may take to answer `/readyz`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A running controller; killed when dropped.
#[derive(Debug)]
pub struct Controller {
    child: Child,
    /// Its log file.
    pub log: PathBuf,
    /// svcplane's admin address.
    admin: Option<SocketAddr>,
}

/// What both sides are started with.
#[derive(Debug, Clone)]
pub struct Limits {
    pub qps: f64,
    pub burst: u32,
}

impl Controller {
    /// Starts `side` against `harness`; `dir` holds its logs (and upstream's
    /// certificates).
    pub fn start(
        side: Side,
        harness: &Harness,
        svcplane: &Path,
        limits: &Limits,
        dir: &Path,
    ) -> anyhow::Result<Self> {
        let kubeconfig = format!("--kubeconfig={}", harness.kubeconfig.display());
        let qps = format!("--kube-api-qps={}", limits.qps);
        let burst = format!("--kube-api-burst={}", limits.burst);
        let (mut cmd, log, admin) = match side {
            Side::Upstream => {
                let mut cmd = Command::new(&harness.bin);
                cmd.arg("kube-controller-manager").args([
                    kubeconfig,
                    "--controllers=endpointslice,endpoint,endpointslicemirroring".into(),
                    "--leader-elect=false".into(),
                    "--bind-address=127.0.0.1".into(),
                    format!("--secure-port={}", free_port()),
                    format!("--cert-dir={}", dir.join("kcm-certs").display()),
                    "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics".into(),
                    "--use-service-account-credentials=false".into(),
                    "--concurrent-service-endpoint-syncs=5".into(),
                    qps,
                    burst,
                ]);
                (cmd, dir.join("kube-controller-manager.log"), None)
            }
            Side::Svcplane => {
                let admin: SocketAddr = format!("127.0.0.1:{}", free_port())
                    .parse()
                    .context("admin address")?;
                let mut cmd = Command::new(svcplane);
                cmd.args([
                    "run".into(),
                    "--webhook=false".into(),
                    "--leader-elect=false".into(),
                    "--controllers=endpointslice,endpoints,endpointslicemirroring".into(),
                    kubeconfig,
                    qps,
                    burst,
                    format!("--metrics-bind-address={admin}"),
                ])
                .env(
                    "RUST_LOG",
                    std::env::var("SVCPLANE_E2E_LOG").unwrap_or_else(|_| "warn".into()),
                );
                (cmd, dir.join("svcplane.log"), Some(admin))
            }
        };
        let file = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone().context("log file")?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {}", side.name()))?;
        Ok(Self { child, log, admin })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for svcplane's `/readyz` (upstream has no plain-HTTP probe: nothing to do).
    pub async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let Some(admin) = self.admin else {
            return Ok(());
        };
        let start = Instant::now();
        loop {
            if !self.alive() {
                bail!("exited before it was ready (log: {})", self.log.display());
            }
            let probe = tokio::task::spawn_blocking(move || http_get(admin, "/readyz")).await;
            if matches!(probe, Ok(Ok((200, _)))) {
                return Ok(());
            }
            if start.elapsed() > READY_TIMEOUT {
                bail!(
                    "not ready after {READY_TIMEOUT:?} (log: {})",
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
