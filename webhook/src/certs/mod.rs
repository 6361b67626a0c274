//! Self-managed webhook certificates: the pure decisions.
//!
//! With `--tls-secret-name`, svcplane keeps its own CA and serving certificate in one
//! Secret that every replica reads (the gatekeeper/kyverno pattern, so no cert-manager
//! and no install-time certificate that a GitOps re-render would replace). This module
//! decides, from the Secret's contents and the time, what — if anything — must change,
//! and issues the new material; [`crate::shell::certs`] reads and writes the Secret
//! (create-if-absent, update with the read `resourceVersion`: one writer wins every
//! change, so replicas never make two CAs) and keeps the webhook configurations'
//! `caBundle` equal to the Secret's bundle.
//!
//! The Secret (`kubernetes.io/tls`) holds:
//! - `tls.crt`, `tls.key`: the serving pair;
//! - `ca.crt`: the trust bundle for `caBundle` — the current CA first, then the
//!   previous one until it expires;
//! - `ca.key`: the current CA's key.
//!
//! Rules (WH-14.1 to WH-14.6 in `docs/webhook.md`; every one has a test named after it):
//! 1. nothing usable (absent, unparsable, a key that is not its certificate's) →
//!    new CA and serving certificate;
//! 2. a certificate is due once two thirds of the lifetime it was issued for have
//!    passed (cert-manager's default), or when expired;
//! 3. a due CA is replaced; the old CA stays in the bundle (until it expires), so a
//!    replica still serving a certificate it signed stays trusted;
//! 4. the serving certificate is re-issued from the current CA when it is due, names
//!    other hosts, or was signed by another CA — in that last case only once the CA is
//!    [`Settings::settle`] old, so the bundle carrying it has reached the API servers
//!    before any replica serves a certificate only it can verify;
//! 5. the serving certificate never outlives its CA;
//! 6. expired CAs leave the bundle.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData,
};
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;
use x509_parser::prelude::X509Certificate;

/// Secret key of the trust bundle (current CA first).
pub const CA_BUNDLE_KEY: &str = "ca.crt";
/// Secret key of the current CA's private key.
pub const CA_KEY_KEY: &str = "ca.key";
/// Secret key of the serving certificate.
pub const CERT_KEY: &str = "tls.crt";
/// Secret key of the serving key.
pub const KEY_KEY: &str = "tls.key";

/// How far `notBefore` is set in the past, so replicas and API servers whose clocks
/// lag a little still accept a certificate issued just now.
pub const BACKDATE: Duration = Duration::from_secs(3600);

/// How many CAs the bundle keeps at most (current and previous).
const MAX_BUNDLE: usize = 2;

/// What the certificates must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The serving certificate's names (DNS names or IP addresses), first one also its
    /// common name.
    pub hosts: Vec<String>,
    /// Lifetime of a new CA.
    pub ca_validity: Duration,
    /// Lifetime of a new serving certificate (capped at the CA's end).
    pub cert_validity: Duration,
    /// How long a new CA waits in the bundle before it signs the serving certificate.
    pub settle: Duration,
}

/// The default [`Settings::settle`]: far longer than an API server takes to see a
/// changed webhook configuration (its informer), far shorter than any lifetime.
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(300);

/// The hosts of the webhook Service `service` in `namespace`, as the API server names
/// it (`<svc>.<ns>.svc`), plus the full cluster-domain form.
pub fn service_hosts(service: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// PEM material as stored in the Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Material {
    /// `ca.crt`: the trust bundle, current CA first.
    pub ca_bundle: String,
    /// `ca.key`: the current CA's key.
    pub ca_key: String,
    /// `tls.crt`: the serving certificate.
    pub cert: String,
    /// `tls.key`: the serving key.
    pub key: String,
}

impl Material {
    /// From the Secret's data; `None` if a key is missing or not UTF-8.
    pub fn from_data(get: impl Fn(&str) -> Option<Vec<u8>>) -> Option<Self> {
        let text = |k: &str| get(k).and_then(|v| String::from_utf8(v).ok());
        Some(Self {
            ca_bundle: text(CA_BUNDLE_KEY)?,
            ca_key: text(CA_KEY_KEY)?,
            cert: text(CERT_KEY)?,
            key: text(KEY_KEY)?,
        })
    }

    /// The Secret's data entries.
    pub fn to_data(&self) -> [(&'static str, &str); 4] {
        [
            (CA_BUNDLE_KEY, &self.ca_bundle),
            (CA_KEY_KEY, &self.ca_key),
            (CERT_KEY, &self.cert),
            (KEY_KEY, &self.key),
        ]
    }
}

/// Why certificates could not be read or issued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    /// A PEM block or certificate that does not parse.
    #[error("{what} is not a usable PEM certificate: {reason}")]
    Unparsable {
        /// Which entry.
        what: &'static str,
        /// The parser's complaint.
        reason: String,
    },
    /// A private key that does not parse.
    #[error("{what} is not a usable PEM private key: {reason}")]
    BadKey {
        /// Which entry.
        what: &'static str,
        /// The parser's complaint.
        reason: String,
    },
    /// rcgen refused to issue (bad host name, ...).
    #[error("cannot issue a certificate: {0}")]
    Issue(String),
}

/// What the decisions read of one certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// `notBefore`, Unix seconds.
    pub not_before: i64,
    /// `notAfter`, Unix seconds.
    pub not_after: i64,
    /// basicConstraints CA:true.
    pub is_ca: bool,
    /// DNS and IP SANs, normalised.
    pub hosts: BTreeSet<String>,
    /// DER of the subject name.
    pub subject: Vec<u8>,
}

impl CertInfo {
    /// When it was issued: `notBefore` plus the [`BACKDATE`] svcplane applies (a
    /// certificate svcplane did not issue may have less; then `notBefore` itself).
    pub fn issued(&self) -> i64 {
        let backdated = self.not_before.saturating_add(BACKDATE.as_secs() as i64);
        if backdated < self.not_after {
            backdated
        } else {
            self.not_before
        }
    }

    /// Rule 2: two thirds of the lifetime it was issued for have passed, or it has
    /// expired.
    pub fn due(&self, now: i64) -> bool {
        let issued = self.issued();
        let lifetime = self.not_after.saturating_sub(issued).max(0);
        now >= issued.saturating_add(lifetime * 2 / 3) || self.expired(now)
    }

    /// Past `notAfter`.
    pub fn expired(&self, now: i64) -> bool {
        now >= self.not_after
    }
}

/// The Secret's contents, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspected {
    /// The bundle's CAs, current first.
    pub bundle: Vec<CertInfo>,
    /// `ca.key` is the current CA's key.
    pub ca_key_matches: bool,
    /// The serving certificate.
    pub cert: CertInfo,
    /// `tls.key` is the serving certificate's key.
    pub cert_key_matches: bool,
    /// Which CA of the bundle signed the serving certificate (0: the current one;
    /// `None`: none of them).
    pub signed_by: Option<usize>,
}

impl Inspected {
    /// The current CA (the bundle's first).
    pub fn ca(&self) -> &CertInfo {
        &self.bundle[0]
    }
}

fn pems(what: &'static str, text: &str) -> Result<Vec<Vec<u8>>, CertError> {
    let unparsable = |reason: String| CertError::Unparsable { what, reason };
    let blocks = Pem::iter_from_buffer(text.as_bytes())
        .map(|p| p.map(|p| p.contents))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unparsable(e.to_string()))?;
    if blocks.is_empty() {
        return Err(unparsable("no PEM block".to_owned()));
    }
    Ok(blocks)
}

fn parse<'a>(what: &'static str, der: &'a [u8]) -> Result<X509Certificate<'a>, CertError> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, c)| c)
        .map_err(|e| CertError::Unparsable {
            what,
            reason: e.to_string(),
        })
}

fn normalise_host(h: &str) -> String {
    match h.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => h.to_ascii_lowercase(),
    }
}

fn info(c: &X509Certificate<'_>) -> CertInfo {
    let mut hosts = BTreeSet::new();
    if let Ok(Some(san)) = c.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(d) => {
                    hosts.insert(normalise_host(d));
                }
                GeneralName::IPAddress(b) => {
                    let ip = match b.len() {
                        4 => <[u8; 4]>::try_from(*b).ok().map(IpAddr::from),
                        16 => <[u8; 16]>::try_from(*b).ok().map(IpAddr::from),
                        _ => None,
                    };
                    if let Some(ip) = ip {
                        hosts.insert(ip.to_string());
                    }
                }
                _ => {}
            }
        }
    }
    CertInfo {
        not_before: c.validity().not_before.timestamp(),
        not_after: c.validity().not_after.timestamp(),
        is_ca: c.is_ca(),
        hosts,
        subject: c.subject().as_raw().to_vec(),
    }
}

fn key_matches(
    what: &'static str,
    key_pem: &str,
    c: &X509Certificate<'_>,
) -> Result<bool, CertError> {
    let key = KeyPair::from_pem(key_pem).map_err(|e| CertError::BadKey {
        what,
        reason: e.to_string(),
    })?;
    Ok(key.subject_public_key_info() == c.public_key().raw)
}

/// Parse the Secret's material (no clock involved).
pub fn inspect(m: &Material) -> Result<Inspected, CertError> {
    let bundle_der = pems(CA_BUNDLE_KEY, &m.ca_bundle)?;
    let cert_der = pems(CERT_KEY, &m.cert)?;
    let bundle = bundle_der
        .iter()
        .map(|d| parse(CA_BUNDLE_KEY, d))
        .collect::<Result<Vec<_>, _>>()?;
    let cert = parse(CERT_KEY, &cert_der[0])?;
    let signed_by = bundle.iter().position(|ca| {
        cert.issuer().as_raw() == ca.subject().as_raw()
            && cert.verify_signature(Some(ca.public_key())).is_ok()
    });
    Ok(Inspected {
        bundle: bundle.iter().map(info).collect(),
        ca_key_matches: key_matches(CA_KEY_KEY, &m.ca_key, &bundle[0])?,
        cert: info(&cert),
        cert_key_matches: key_matches(KEY_KEY, &m.key, &cert)?,
        signed_by,
    })
}

/// What has to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing.
    Keep,
    /// Rule 1: a new CA and serving certificate; the bundle holds only the new CA.
    Create,
    /// Rule 3: a new CA, the old one kept in the bundle; the serving certificate is
    /// kept while it is usable (rule 4 re-issues it once the new CA settled).
    RotateCa,
    /// Rule 4: a new serving certificate from the current CA.
    ReissueCert,
    /// Rule 6: drop expired CAs from the bundle.
    PruneBundle,
}

/// The hosts `settings` asks for, normalised as [`CertInfo::hosts`].
fn wanted_hosts(settings: &Settings) -> BTreeSet<String> {
    settings.hosts.iter().map(|h| normalise_host(h)).collect()
}

fn settled(ca: &CertInfo, settings: &Settings, now: i64) -> bool {
    now >= ca.issued() + settings.settle.as_secs() as i64
}

/// Whether the serving certificate, as it is, is fit to serve (it may still be due).
fn cert_usable(i: &Inspected, settings: &Settings, now: i64) -> bool {
    i.cert_key_matches && !i.cert.expired(now) && i.cert.hosts == wanted_hosts(settings)
}

/// Decide what to change (`None`: no Secret, or one whose contents do not parse),
/// with a reason for the log.
pub fn decide(
    current: Option<&Inspected>,
    settings: &Settings,
    now: i64,
) -> (Action, &'static str) {
    let Some(i) = current else {
        return (Action::Create, "no usable certificates yet");
    };
    let ca = i.ca();
    if !ca.is_ca || !i.ca_key_matches {
        return (
            Action::Create,
            "the stored CA and its key do not belong together",
        );
    }
    if ca.due(now) {
        return (
            Action::RotateCa,
            "the CA has used two thirds of its lifetime",
        );
    }
    if !i.cert_key_matches {
        return (
            Action::ReissueCert,
            "the serving key is not the certificate's",
        );
    }
    if i.cert.hosts != wanted_hosts(settings) {
        return (
            Action::ReissueCert,
            "the serving certificate names other hosts",
        );
    }
    if i.cert.due(now) {
        return (
            Action::ReissueCert,
            "the serving certificate has used two thirds of its lifetime",
        );
    }
    match i.signed_by {
        Some(0) => {}
        None => {
            return (
                Action::ReissueCert,
                "no CA of the bundle signed the serving certificate",
            );
        }
        Some(_) if settled(ca, settings, now) => {
            return (
                Action::ReissueCert,
                "the serving certificate is from the previous CA",
            );
        }
        Some(_) => {}
    }
    if i.bundle.len() > MAX_BUNDLE || i.bundle.iter().skip(1).any(|c| c.expired(now)) {
        return (Action::PruneBundle, "the bundle holds an expired CA");
    }
    (Action::Keep, "current")
}

fn datetime(secs: i64) -> Result<time::OffsetDateTime, CertError> {
    time::OffsetDateTime::from_unix_timestamp(secs).map_err(|e| CertError::Issue(e.to_string()))
}

fn issue_err(e: rcgen::Error) -> CertError {
    CertError::Issue(e.to_string())
}

/// A new CA: (certificate PEM, key PEM).
fn new_ca(settings: &Settings, now: i64) -> Result<(String, String), CertError> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(issue_err)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    // A CN per CA, so the old and the new one in a bundle are told apart by name.
    params
        .distinguished_name
        .push(DnType::CommonName, format!("svcplane-webhook-ca-{now}"));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = datetime(now - BACKDATE.as_secs() as i64)?;
    params.not_after = datetime(now.saturating_add(settings.ca_validity.as_secs() as i64))?;
    let key = KeyPair::generate().map_err(issue_err)?;
    let cert = params.self_signed(&key).map_err(issue_err)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A serving certificate from the CA `ca_pem`/`ca_key_pem` that ends at `ca_end` at
/// the latest (rule 5): (certificate PEM, key PEM).
fn new_cert(
    settings: &Settings,
    ca_pem: &str,
    ca_key_pem: &str,
    ca_end: i64,
    now: i64,
) -> Result<(String, String), CertError> {
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(|e| CertError::BadKey {
        what: CA_KEY_KEY,
        reason: e.to_string(),
    })?;
    let issuer = Issuer::from_ca_cert_pem(ca_pem, ca_key).map_err(issue_err)?;
    let mut params = CertificateParams::new(settings.hosts.clone()).map_err(issue_err)?;
    if let Some(first) = settings.hosts.first() {
        params
            .distinguished_name
            .push(DnType::CommonName, first.clone());
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = datetime(now - BACKDATE.as_secs() as i64)?;
    let end = now
        .saturating_add(settings.cert_validity.as_secs() as i64)
        .min(ca_end);
    params.not_after = datetime(end)?;
    let key = KeyPair::generate().map_err(issue_err)?;
    let cert = params.signed_by(&key, &issuer).map_err(issue_err)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A self-signed serving certificate for `hosts` (certificate PEM, key PEM), valid from
/// `now` (backdated) for `validity`: for listeners whose clients do not check the
/// chain, such as the secure metrics port without `--metrics-tls-cert-file` (as
/// kube-controller-manager generates one when its secure port has no files).
pub fn self_signed(
    hosts: &[String],
    validity: Duration,
    now: i64,
) -> Result<(String, String), CertError> {
    let mut params = CertificateParams::new(hosts.to_vec()).map_err(issue_err)?;
    let common_name = hosts.first().map_or("localhost", String::as_str);
    params
        .distinguished_name
        .push(DnType::CommonName, format!("{common_name}@{now}"));
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = datetime(now - BACKDATE.as_secs() as i64)?;
    params.not_after = datetime(now.saturating_add(validity.as_secs() as i64))?;
    let key = KeyPair::generate().map_err(issue_err)?;
    let cert = params.self_signed(&key).map_err(issue_err)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The PEM blocks of a bundle paired with what they say, so pruning keeps text as is.
fn bundle_blocks(bundle: &str) -> Vec<String> {
    const END: &str = "-----END CERTIFICATE-----";
    bundle
        .split_inclusive(END)
        .map(str::trim)
        .filter(|b| b.contains("-----BEGIN CERTIFICATE-----"))
        .map(|b| format!("{b}\n"))
        .collect()
}

/// Carry out `action` on `current` (required for everything but [`Action::Create`]).
pub fn apply(
    action: Action,
    current: Option<(&Material, &Inspected)>,
    settings: &Settings,
    now: i64,
) -> Result<Material, CertError> {
    let fresh = || -> Result<Material, CertError> {
        let (ca, ca_key) = new_ca(settings, now)?;
        let ca_end = now.saturating_add(settings.ca_validity.as_secs() as i64);
        let (cert, key) = new_cert(settings, &ca, &ca_key, ca_end, now)?;
        Ok(Material {
            ca_bundle: ca,
            ca_key,
            cert,
            key,
        })
    };
    let Some((m, i)) = current else {
        return fresh();
    };
    // Expired CAs (beyond the current one) never stay (rule 6).
    let kept_old: Vec<String> = bundle_blocks(&m.ca_bundle)
        .into_iter()
        .zip(&i.bundle)
        .skip(1)
        .filter(|(_, info)| !info.expired(now))
        .map(|(b, _)| b)
        .collect();
    match action {
        Action::Keep => Ok(m.clone()),
        Action::Create => fresh(),
        Action::RotateCa => {
            let (ca, ca_key) = new_ca(settings, now)?;
            let mut bundle = vec![ca.clone()];
            if !i.ca().expired(now) {
                bundle.extend(bundle_blocks(&m.ca_bundle).into_iter().take(1));
            }
            bundle.truncate(MAX_BUNDLE);
            let (cert, key) = if cert_usable(i, settings, now) {
                (m.cert.clone(), m.key.clone())
            } else {
                let ca_end = now.saturating_add(settings.ca_validity.as_secs() as i64);
                new_cert(settings, &ca, &ca_key, ca_end, now)?
            };
            Ok(Material {
                ca_bundle: bundle.concat(),
                ca_key,
                cert,
                key,
            })
        }
        Action::ReissueCert => {
            let current_ca = bundle_blocks(&m.ca_bundle)
                .into_iter()
                .next()
                .unwrap_or_default();
            let (cert, key) = new_cert(settings, &current_ca, &m.ca_key, i.ca().not_after, now)?;
            let mut bundle = vec![current_ca];
            bundle.extend(kept_old);
            bundle.truncate(MAX_BUNDLE);
            Ok(Material {
                ca_bundle: bundle.concat(),
                ca_key: m.ca_key.clone(),
                cert,
                key,
            })
        }
        Action::PruneBundle => {
            let mut bundle: Vec<String> = bundle_blocks(&m.ca_bundle).into_iter().take(1).collect();
            bundle.extend(kept_old);
            bundle.truncate(MAX_BUNDLE);
            Ok(Material {
                ca_bundle: bundle.concat(),
                ..m.clone()
            })
        }
    }
}

/// One step: what the Secret should hold now and why (`None`: keep it as it is).
/// `current` is `None` when there is no Secret or it lacks one of the four entries.
pub fn next(
    current: Option<&Material>,
    settings: &Settings,
    now: i64,
) -> Result<Option<(Material, String)>, CertError> {
    let (pair, unusable) = match current.map(|m| (m, inspect(m))) {
        Some((m, Ok(i))) => (Some((m, i)), None),
        Some((_, Err(e))) => (None, Some(e)),
        None => (None, None),
    };
    let (action, why) = decide(pair.as_ref().map(|(_, i)| i), settings, now);
    if action == Action::Keep {
        return Ok(None);
    }
    let why = match unusable {
        Some(e) => format!("the stored certificates are unusable ({e})"),
        None => why.to_owned(),
    };
    apply(action, pair.as_ref().map(|(m, i)| (*m, i)), settings, now).map(|m| Some((m, why)))
}

#[cfg(test)]
mod tests;
