//! The webhook's serving certificate, and reloading it without a restart.
//!
//! The certificate comes from a Secret volume (cert-manager, Helm or a user's Secret).
//! Those rotate underneath a running pod, and the API server's `caBundle` moves with
//! them, so a replica that kept its first certificate would eventually be refused by the
//! API server. Kubelet updates a Secret volume by swapping a `..data` symlink, which
//! per-file inotify watches do not see (kubernetes/kubernetes#111947), so
//! [`CertReloader::run`] polls instead: it re-reads both files, compares a hash of
//! their contents, and swaps the rustls config only when the pair changed *and* is
//! usable. A broken pair is logged and ignored, so the replica keeps serving with the
//! last good certificate.

use std::error::Error as _;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use rustls::ServerConfig;
use rustls::pki_types::pem::{PemObject, SectionKind};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::Mutex;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info};

mod error;

pub use error::{PemFile, TlsError};

/// How often the certificate files are re-read unless configured otherwise. Kubelet
/// itself only refreshes Secret volumes every minute or so, so polling faster buys
/// little.
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(30);

/// What the reloader has done so far: for `/readyz`, metrics and tests. Cheap to read
/// from any thread.
#[derive(Debug)]
pub struct CertStatus {
    loaded: AtomicBool,
    reloads: AtomicU64,
    failed_reloads: AtomicU64,
    /// `notAfter` of the served leaf certificate (Unix seconds), `i64::MIN` if unknown.
    not_after: AtomicI64,
}

impl Default for CertStatus {
    fn default() -> Self {
        Self {
            loaded: AtomicBool::new(false),
            reloads: AtomicU64::new(0),
            failed_reloads: AtomicU64::new(0),
            not_after: AtomicI64::new(i64::MIN),
        }
    }
}

impl CertStatus {
    /// True once a valid certificate/key pair is being served.
    pub fn is_loaded(&self) -> bool {
        self.loaded.load(Ordering::Relaxed)
    }

    /// How many times a changed pair replaced the served one (the first load not
    /// counted).
    pub fn reloads(&self) -> u64 {
        self.reloads.load(Ordering::Relaxed)
    }

    /// How many reload attempts failed: a file that could not be read at a poll, or a
    /// changed pair that was unusable (counted once per distinct content).
    pub fn failed_reloads(&self) -> u64 {
        self.failed_reloads.load(Ordering::Relaxed)
    }

    /// When the served certificate expires (Unix seconds), if its PEM could be read.
    pub fn not_after(&self) -> Option<i64> {
        Some(self.not_after.load(Ordering::Relaxed)).filter(|t| *t != i64::MIN)
    }

    /// Note the expiry of the pair now served.
    fn serving(&self, cert_pem: &[u8]) {
        if let Some(t) = leaf_not_after(cert_pem) {
            self.not_after.store(t, Ordering::Relaxed);
        }
    }
}

/// `notAfter` of the first certificate in a PEM chain (Unix seconds).
fn leaf_not_after(cert_pem: &[u8]) -> Option<i64> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem).ok()?;
    let cert = pem.parse_x509().ok()?;
    Some(cert.validity().not_after.timestamp())
}

/// What one poll of the files did.
#[derive(Debug)]
pub enum Reload {
    /// The files hold what is already served, or the same broken pair as last time.
    Unchanged,
    /// The files changed while being read (a Secret update in progress); the next
    /// poll will see the settled pair.
    InFlux,
    /// A new pair is now served.
    Reloaded,
    /// The files changed but the new pair is unusable; the old pair stays.
    Failed(TlsError),
}

/// Serves the certificate in `cert_file`/`key_file` and keeps it current; or, built
/// with [`CertReloader::from_pem`], serves a pair held in memory that its owner
/// replaces with [`CertReloader::install_pem`] (self-managed certificates read from a
/// Secret through the API).
#[derive(Debug, Clone)]
pub struct CertReloader {
    /// The files, or (in-memory pairs) names for messages.
    cert_file: PathBuf,
    key_file: PathBuf,
    /// Whether [`CertReloader::run`] polls the files (false for in-memory pairs).
    from_files: bool,
    reload_interval: Duration,
    rustls: RustlsConfig,
    status: Arc<CertStatus>,
    /// Hashes of the served pair and of the last rejected one. A tokio mutex because a
    /// reload holds it across file reads, so two concurrent polls cannot interleave.
    seen: Arc<Mutex<Seen>>,
}

#[derive(Debug)]
struct Seen {
    served: u64,
    rejected: Option<u64>,
}

impl CertReloader {
    /// Load the pair once. Fails when it is unusable: at startup there is no old
    /// certificate to fall back on, and failing loudly beats serving nothing.
    pub async fn load(
        cert_file: impl Into<PathBuf>,
        key_file: impl Into<PathBuf>,
        reload_interval: Duration,
    ) -> Result<Self, TlsError> {
        let cert_file = cert_file.into();
        let key_file = key_file.into();
        let (cert, key) = read_pair(&cert_file, &key_file).await?;
        let served = digest(&cert, &key);
        let config = server_config(&cert, &key, &cert_file, &key_file)?;
        let status = Arc::new(CertStatus::default());
        status.loaded.store(true, Ordering::Relaxed);
        status.serving(&cert);
        info!(cert_file = %cert_file.display(), key_file = %key_file.display(), "loaded the serving certificate");
        Ok(Self {
            cert_file,
            key_file,
            from_files: true,
            reload_interval,
            rustls: RustlsConfig::from_config(Arc::new(config)),
            status,
            seen: Arc::new(Mutex::new(Seen {
                served,
                rejected: None,
            })),
        })
    }

    /// Serve `cert`/`key` (PEM) held in memory; `source` names where they came from in
    /// messages (e.g. `secret kube-system/svcplane-webhook-tls`). Fails when unusable.
    pub fn from_pem(source: &str, cert: &[u8], key: &[u8]) -> Result<Self, TlsError> {
        let cert_file = PathBuf::from(format!("{source}: tls.crt"));
        let key_file = PathBuf::from(format!("{source}: tls.key"));
        let config = server_config(cert, key, &cert_file, &key_file)?;
        let status = Arc::new(CertStatus::default());
        status.loaded.store(true, Ordering::Relaxed);
        status.serving(cert);
        info!(source, "loaded the serving certificate");
        Ok(Self {
            cert_file,
            key_file,
            from_files: false,
            reload_interval: DEFAULT_RELOAD_INTERVAL,
            rustls: RustlsConfig::from_config(Arc::new(config)),
            status,
            seen: Arc::new(Mutex::new(Seen {
                served: digest(cert, key),
                rejected: None,
            })),
        })
    }

    /// Serve `cert`/`key` from now on if they differ from the served pair and are
    /// usable (in-memory pairs; files are re-read by [`CertReloader::reload`]).
    pub async fn install_pem(&self, cert: &[u8], key: &[u8]) -> Reload {
        let mut seen = self.seen.lock().await;
        let hash = digest(cert, key);
        if hash == seen.served || Some(hash) == seen.rejected {
            return Reload::Unchanged;
        }
        match server_config(cert, key, &self.cert_file, &self.key_file) {
            Ok(config) => {
                self.rustls.reload_from_config(Arc::new(config));
                seen.served = hash;
                seen.rejected = None;
                self.status.reloads.fetch_add(1, Ordering::Relaxed);
                self.status.serving(cert);
                info!(source = %self.cert_file.display(), "serving a new certificate");
                Reload::Reloaded
            }
            Err(e) => {
                seen.rejected = Some(hash);
                self.status.failed_reloads.fetch_add(1, Ordering::Relaxed);
                self.log_failure(&e);
                Reload::Failed(e)
            }
        }
    }

    /// The config the TLS acceptor reads for every new connection; reloads swap what
    /// it points to, so connections already open keep their certificate.
    pub fn rustls_config(&self) -> RustlsConfig {
        self.rustls.clone()
    }

    /// Shared status (loaded, reload counters).
    pub fn status(&self) -> Arc<CertStatus> {
        self.status.clone()
    }

    /// The polling period.
    pub fn reload_interval(&self) -> Duration {
        self.reload_interval
    }

    /// Re-read both files once and swap the served pair if it changed and is usable.
    pub async fn reload(&self) -> Reload {
        let mut seen = self.seen.lock().await;
        let (cert, key) = match read_pair(&self.cert_file, &self.key_file).await {
            Ok(pair) => pair,
            Err(e) => {
                self.status.failed_reloads.fetch_add(1, Ordering::Relaxed);
                self.log_failure(&e);
                return Reload::Failed(e);
            }
        };
        let hash = digest(&cert, &key);
        if hash == seen.served || Some(hash) == seen.rejected {
            return Reload::Unchanged;
        }
        match server_config(&cert, &key, &self.cert_file, &self.key_file) {
            Ok(config) => {
                self.rustls.reload_from_config(Arc::new(config));
                seen.served = hash;
                seen.rejected = None;
                self.status.reloads.fetch_add(1, Ordering::Relaxed);
                self.status.serving(&cert);
                info!(cert_file = %self.cert_file.display(), key_file = %self.key_file.display(), "reloaded the serving certificate");
                Reload::Reloaded
            }
            Err(e) => {
                // Kubelet swaps both files at once, but the two reads above are not
                // atomic: one may see the old Secret and the other the new. If the
                // files differ from what was just read, this was such a torn read and
                // the next poll sees a consistent pair; no need to cry wolf.
                if let Ok((c, k)) = read_pair(&self.cert_file, &self.key_file).await
                    && digest(&c, &k) != hash
                {
                    debug!(cert_file = %self.cert_file.display(), "certificate files changed while being read; retrying at the next poll");
                    return Reload::InFlux;
                }
                seen.rejected = Some(hash);
                self.status.failed_reloads.fetch_add(1, Ordering::Relaxed);
                self.log_failure(&e);
                Reload::Failed(e)
            }
        }
    }

    /// Poll every `reload_interval` until `shutdown` fires (an in-memory pair has no
    /// files to poll: its owner installs new pairs).
    pub async fn run(self, shutdown: CancellationToken) {
        if !self.from_files {
            return;
        }
        let mut ticks = tokio::time::interval(self.reload_interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // The first tick is immediate, and the pair was just loaded.
        ticks.tick().await;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticks.tick() => {}
            }
            self.reload().await;
        }
    }

    fn log_failure(&self, e: &TlsError) {
        error!(
            cert_file = %self.cert_file.display(),
            key_file = %self.key_file.display(),
            error = %chain(e),
            "cannot use the certificate files; still serving the previous certificate"
        );
    }
}

/// The error and its sources on one line, since log fields show only `Display`.
fn chain(e: &TlsError) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

async fn read_pair(cert_file: &Path, key_file: &Path) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    let cert = read(PemFile::Certificate, cert_file).await?;
    let key = read(PemFile::PrivateKey, key_file).await?;
    Ok((cert, key))
}

async fn read(file: PemFile, path: &Path) -> Result<Vec<u8>, TlsError> {
    tokio::fs::read(path).await.map_err(|source| {
        let path = path.to_path_buf();
        if source.kind() == io::ErrorKind::NotFound {
            TlsError::Missing { file, path }
        } else {
            TlsError::Read { file, path, source }
        }
    })
}

/// Change detection only, not security: the contents are trusted files on our own
/// volume, so a fast keyless hash is enough.
fn digest(cert: &[u8], key: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    cert.hash(&mut h);
    key.hash(&mut h);
    h.finish()
}

/// Every PEM section of a file, or why it is not PEM.
fn sections(
    file: PemFile,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<(SectionKind, Vec<u8>)>, TlsError> {
    let not_pem = |reason: String| TlsError::NotPem {
        file,
        path: path.to_path_buf(),
        reason,
    };
    let all = <(SectionKind, Vec<u8>)>::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| not_pem(e.to_string()))?;
    if all.is_empty() {
        return Err(not_pem("no -----BEGIN block found".to_owned()));
    }
    Ok(all)
}

/// Check the pair and build the rustls config for it.
fn server_config(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_path: &Path,
    key_path: &Path,
) -> Result<ServerConfig, TlsError> {
    let chain: Vec<CertificateDer<'static>> = sections(PemFile::Certificate, cert_path, cert_pem)?
        .into_iter()
        .filter_map(|(kind, der)| CertificateDer::from_pem(kind, der))
        .collect();
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert_path.to_path_buf(),
        });
    }
    let mut keys: Vec<PrivateKeyDer<'static>> = sections(PemFile::PrivateKey, key_path, key_pem)?
        .into_iter()
        .filter_map(|(kind, der)| PrivateKeyDer::from_pem(kind, der))
        .collect();
    let key = match (keys.pop(), keys.len()) {
        (None, _) => {
            return Err(TlsError::NoPrivateKey {
                path: key_path.to_path_buf(),
            });
        }
        (Some(key), 0) => key,
        (Some(_), others) => {
            return Err(TlsError::SeveralKeys {
                path: key_path.to_path_buf(),
                count: others + 1,
            });
        }
    };
    let rejected = |source| match source {
        rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
            TlsError::KeyMismatch {
                cert_path: cert_path.to_path_buf(),
                key_path: key_path.to_path_buf(),
            }
        }
        source => TlsError::Rejected {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            source,
        },
    };
    // An explicit provider rather than the process default, so loading cannot depend
    // on whether `main` installed one yet.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(rejected)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(rejected)?;
    // What axum-server's own loaders advertise; kube-apiserver's client prefers h2.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests;
