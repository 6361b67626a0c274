//! The admin side of a process: the plain-HTTP server for `/livez`, `/readyz` and
//! (unless the secure port is on) `/metrics`, and the optional HTTPS metrics port
//! that asks the cluster's RBAC who may read. Both stop together, after the work
//! they report on.

use std::net::SocketAddr;

use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::shell::admin::{self, ReadinessCheck};
use crate::shell::metrics::Metrics;
use crate::shell::secure_metrics::{self, SecureMetrics, SecureMetricsError};

/// Why the admin servers could not start.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(transparent)]
    SecureMetrics(#[from] SecureMetricsError),
    #[error("admin server on {address}: {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// The running admin servers.
#[derive(Debug)]
pub struct AdminServers {
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl AdminServers {
    /// Starts the plain server on `bind` (none when `None`, as tests run) and the
    /// secure metrics port when `secure` names its settings and the client that
    /// reviews tokens. `/readyz` fails from the moment `shutdown` fires.
    pub async fn start(
        bind: Option<SocketAddr>,
        secure: Option<(&SecureMetrics, Client)>,
        metrics: Metrics,
        ready: ReadinessCheck,
        shutdown: CancellationToken,
    ) -> Result<Self, AdminError> {
        let stop = CancellationToken::new();
        let mut tasks = Vec::new();
        let mut secure_addr = None;
        if let Some((settings, client)) = secure {
            let server =
                secure_metrics::serve(settings, metrics.clone(), client, stop.clone()).await?;
            secure_addr = Some(server.local_addr);
            tasks.push(server.task);
        }
        if let Some(address) = bind {
            match admin::serve(address, secure_addr, metrics, ready, shutdown, stop.clone()).await {
                Ok(server) => tasks.push(server.task),
                Err(source) => {
                    // The secure port, if it started, must not outlive the failure.
                    stop.cancel();
                    return Err(AdminError::Bind { address, source });
                }
            }
        }
        Ok(Self { stop, tasks })
    }

    /// Stops both servers and waits for them.
    pub async fn stop(self) {
        self.stop.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
    }
}
