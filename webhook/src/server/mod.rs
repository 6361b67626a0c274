//! The webhook's HTTPS server: the thin HTTP shell around an [`AdmissionHandler`].
//!
//! kube-apiserver calls admission webhooks over HTTPS only, gives each call a deadline
//! (`timeoutSeconds`, 5 s in our chart) and then applies the `failurePolicy`. So this
//! module owns exactly what must hold whatever the handler does:
//! - routing of the two webhook paths plus `/healthz` and `/readyz`;
//! - the 3 MiB body limit (413) and a deadline shorter than the API server's (504), so
//!   the API server gets a clear answer instead of its own timeout;
//! - a JSON error body for every 4xx/5xx the server itself produces;
//! - TLS with a certificate that reloads in place ([`crate::tls`]);
//! - a shutdown that keeps answering while the Service's endpoints catch up (see
//!   [`ServerConfig::drain`]).
//!
//! Everything about AdmissionReviews is the handler's job.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum_server::Handle;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::handler::AdmissionHandler;
use crate::tls::{CertReloader, CertStatus, DEFAULT_RELOAD_INTERVAL, TlsError};

mod routes;

pub use routes::router;

/// Where the webhook listens unless configured otherwise.
pub const DEFAULT_BIND_ADDRESS: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::UNSPECIFIED), 9443);

/// The default deadline for reading a request and answering it. It must stay below
/// the webhook's `timeoutSeconds` (chart default 5 s): a 504 from us arrives while the
/// API server still listens, so its log names the cause instead of a bare timeout.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(4);

/// The default time the server keeps serving after shutdown starts.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(5);

/// Settings of the HTTPS server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on (`--bind-address`/`--secure-port`).
    pub bind_address: SocketAddr,
    /// Where the serving certificate comes from.
    pub certs: Certs,
    /// Deadline for reading a request body and answering it; past it the answer is 504.
    pub request_timeout: Duration,
    /// How often the certificate files are re-read.
    pub reload_interval: Duration,
    /// After the shutdown token fires, how long the server keeps accepting and
    /// answering (with `/readyz` failing and HTTP/1 responses carrying
    /// `Connection: close`), because the API server keeps sending to this pod until
    /// the endpoint removal reaches it. Requests still in flight after the drain get
    /// up to `request_timeout` more. `terminationGracePeriodSeconds` must exceed
    /// `drain + request_timeout + 1 s`.
    pub drain: Duration,
}

/// The serving certificate's source.
#[derive(Debug, Clone)]
pub enum Certs {
    /// PEM files (`--tls-cert-file`, `--tls-private-key-file`), re-read every
    /// `reload_interval`.
    Files {
        /// PEM certificate chain.
        cert_file: PathBuf,
        /// PEM private key.
        key_file: PathBuf,
    },
    /// A pair already loaded, kept current by its owner (self-managed certificates).
    Loaded(CertReloader),
}

impl ServerConfig {
    /// Defaults for everything but the certificate files.
    pub fn new(cert_file: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> Self {
        Self {
            bind_address: DEFAULT_BIND_ADDRESS,
            certs: Certs::Files {
                cert_file: cert_file.into(),
                key_file: key_file.into(),
            },
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            reload_interval: DEFAULT_RELOAD_INTERVAL,
            drain: DEFAULT_DRAIN,
        }
    }
}

/// Why the server could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The certificate files are unusable at startup.
    #[error("cannot load the webhook's serving certificate")]
    Tls(#[from] TlsError),
    /// The address cannot be listened on.
    #[error("cannot listen on {address}")]
    Bind {
        /// The configured address.
        address: SocketAddr,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// The accept loop failed.
    #[error("the webhook's HTTPS server failed")]
    Serve(#[source] std::io::Error),
    /// The server task panicked or was aborted.
    #[error("the webhook's HTTPS server task ended abnormally")]
    Task(#[source] tokio::task::JoinError),
}

/// A server that is listening.
#[derive(Debug)]
pub struct Running {
    /// The address actually bound (the port is known even when 0 was asked for).
    pub local_addr: SocketAddr,
    certs: Arc<CertStatus>,
    task: JoinHandle<Result<(), ServerError>>,
}

impl Running {
    /// Certificate status, for the admin server's `/readyz` and for metrics.
    pub fn certs(&self) -> Arc<CertStatus> {
        self.certs.clone()
    }

    /// Wait until the server has shut down (after the token fired and the drain ran).
    pub async fn wait(self) -> Result<(), ServerError> {
        self.task.await.map_err(ServerError::Task)?
    }
}

/// Serve `handler` until `shutdown` fires and the drain is over.
pub async fn serve<H: AdmissionHandler>(
    handler: Arc<H>,
    config: ServerConfig,
    shutdown: CancellationToken,
) -> Result<(), ServerError> {
    bind(handler, config, shutdown).await?.wait().await
}

/// Load the certificate, listen, and serve in a background task. Returns once the
/// socket is bound, so the caller (a test, or `main` wiring readiness) knows the port.
pub async fn bind<H: AdmissionHandler>(
    handler: Arc<H>,
    config: ServerConfig,
    shutdown: CancellationToken,
) -> Result<Running, ServerError> {
    // `main` installs it too; this keeps tests and embedders from depending on that.
    let _ = rustls::crypto::ring::default_provider().install_default();

    let reloader = match config.certs {
        Certs::Files {
            cert_file,
            key_file,
        } => CertReloader::load(&cert_file, &key_file, config.reload_interval).await?,
        Certs::Loaded(reloader) => reloader,
    };
    let address = config.bind_address;
    let (local_addr, server, handle) = listen_tls(address, reloader.rustls_config())
        .await
        .map_err(|source| ServerError::Bind { address, source })?;
    let certs = reloader.status();
    let app = router(
        handler,
        certs.clone(),
        config.request_timeout,
        shutdown.clone(),
    );

    let reloading = tokio::spawn(reloader.run(shutdown.clone()));
    let stopping = tokio::spawn(stop_after_drain(
        handle,
        shutdown,
        config.drain,
        config.request_timeout,
    ));
    info!(address = %local_addr, "webhook listening (HTTPS)");
    let task = tokio::spawn(async move {
        let served = server.serve(app.into_make_service()).await;
        // After a normal stop both have ended already; after a failure they would
        // otherwise wait for a token that may never fire.
        reloading.abort();
        stopping.abort();
        match served {
            Ok(()) => {
                info!("webhook server stopped");
                Ok(())
            }
            Err(e) => {
                error!(error = %e, "webhook server failed");
                Err(ServerError::Serve(e))
            }
        }
    });
    Ok(Running {
        local_addr,
        certs,
        task,
    })
}

/// An HTTPS server listening on `address` with `tls`, not serving yet: the address
/// actually bound (the port is known even when 0 was asked for), the server, and the
/// handle that stops it. Shared with the secure metrics port.
pub async fn listen_tls(
    address: SocketAddr,
    tls: axum_server::tls_rustls::RustlsConfig,
) -> std::io::Result<(
    SocketAddr,
    axum_server::Server<SocketAddr, axum_server::tls_rustls::RustlsAcceptor>,
    Handle<SocketAddr>,
)> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    let local_addr = listener.local_addr()?;
    let handle: Handle<SocketAddr> = Handle::new();
    let server =
        axum_server::tls_rustls::from_tcp_rustls(listener.into_std()?, tls)?.handle(handle.clone());
    Ok((local_addr, server, handle))
}

/// Keep serving for `drain` after the token fires, then stop accepting and give
/// requests in flight the rest of their deadline.
async fn stop_after_drain(
    handle: Handle<SocketAddr>,
    shutdown: CancellationToken,
    drain: Duration,
    request_timeout: Duration,
) {
    shutdown.cancelled().await;
    info!(drain_ms = drain.as_millis(), "shutting down: draining");
    tokio::time::sleep(drain).await;
    // A request accepted just before this point may run for a whole request_timeout;
    // the extra second covers writing its answer.
    handle.graceful_shutdown(Some(request_timeout + Duration::from_secs(1)));
}
