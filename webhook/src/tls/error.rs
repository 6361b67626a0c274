//! Why a certificate/key pair cannot be used, naming the file and the problem, so an
//! operator reading one log line knows which Secret key to fix.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Which of the two files an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PemFile {
    /// `--tls-cert-file`.
    Certificate,
    /// `--tls-private-key-file`.
    PrivateKey,
}

impl fmt::Display for PemFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Certificate => "certificate",
            Self::PrivateKey => "private key",
        })
    }
}

/// Why a certificate/key pair cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file is not there (yet): a wrong path, or a Secret volume not populated.
    #[error("{file} file {} does not exist", path.display())]
    Missing {
        /// Which file.
        file: PemFile,
        /// Its path.
        path: PathBuf,
    },
    /// The file exists but cannot be read.
    #[error("cannot read {file} file {}", path.display())]
    Read {
        /// Which file.
        file: PemFile,
        /// Its path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The file is not PEM at all (for example DER, or a half-written file).
    #[error("{file} file {} is not PEM: {reason}", path.display())]
    NotPem {
        /// Which file.
        file: PemFile,
        /// Its path.
        path: PathBuf,
        /// What the PEM parser objected to.
        reason: String,
    },
    /// PEM, but without a `CERTIFICATE` block.
    #[error("certificate file {} holds no CERTIFICATE block", path.display())]
    NoCertificate {
        /// The certificate file's path.
        path: PathBuf,
    },
    /// PEM, but without a private key block.
    #[error("private key file {} holds no PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block", path.display())]
    NoPrivateKey {
        /// The key file's path.
        path: PathBuf,
    },
    /// More than one private key: which one the certificate belongs to is ambiguous.
    #[error("private key file {} holds {count} private keys; expected exactly one", path.display())]
    SeveralKeys {
        /// The key file's path.
        path: PathBuf,
        /// How many keys it holds.
        count: usize,
    },
    /// The key is not the one the certificate was issued for.
    #[error(
        "private key {} does not match the public key of certificate {}",
        key_path.display(),
        cert_path.display()
    )]
    KeyMismatch {
        /// The certificate file's path.
        cert_path: PathBuf,
        /// The key file's path.
        key_path: PathBuf,
    },
    /// rustls refused the pair for another reason (an unparsable certificate or key, or
    /// an unsupported key type).
    #[error(
        "certificate {} with private key {} is unusable",
        cert_path.display(),
        key_path.display()
    )]
    Rejected {
        /// The certificate file's path.
        cert_path: PathBuf,
        /// The key file's path.
        key_path: PathBuf,
        /// rustls' reason.
        #[source]
        source: rustls::Error,
    },
}
