//! Error messages and pair checks, without sockets.

use super::*;

fn pair() -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    (cert.pem(), key.serialize_pem())
}

fn check(cert: &str, key: &str) -> Result<ServerConfig, TlsError> {
    server_config(
        cert.as_bytes(),
        key.as_bytes(),
        Path::new("/certs/tls.crt"),
        Path::new("/certs/tls.key"),
    )
}

fn message(r: Result<ServerConfig, TlsError>) -> String {
    chain(&r.err().unwrap())
}

#[test]
fn a_matching_pair_builds() {
    let (cert, key) = pair();
    let config = check(&cert, &key).unwrap();
    assert_eq!(config.alpn_protocols[1], b"http/1.1");
    // The cert and key may also share one file, as some tools write them.
    let both = format!("{cert}{key}");
    check(&both, &both).unwrap();
}

#[test]
fn not_pem() {
    let (_, key) = pair();
    assert_eq!(
        message(check("garbage", &key)),
        "certificate file /certs/tls.crt is not PEM: no -----BEGIN block found"
    );
    let truncated = "-----BEGIN CERTIFICATE-----\nMIIB\n";
    assert!(
        message(check(truncated, &key))
            .starts_with("certificate file /certs/tls.crt is not PEM: missing section end")
    );
}

#[test]
fn no_certificate_and_no_key() {
    let (cert, key) = pair();
    assert_eq!(
        message(check(&key, &key)),
        "certificate file /certs/tls.crt holds no CERTIFICATE block"
    );
    assert_eq!(
        message(check(&cert, &cert)),
        "private key file /certs/tls.key holds no PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block"
    );
    assert_eq!(
        message(check(&cert, "")),
        "private key file /certs/tls.key is not PEM: no -----BEGIN block found"
    );
}

#[test]
fn several_keys() {
    let (cert, key) = pair();
    let (_, other) = pair();
    assert_eq!(
        message(check(&cert, &format!("{key}{other}"))),
        "private key file /certs/tls.key holds 2 private keys; expected exactly one"
    );
}

#[test]
fn key_mismatch() {
    let (cert, _) = pair();
    let (_, other) = pair();
    assert_eq!(
        message(check(&cert, &other)),
        "private key /certs/tls.key does not match the public key of certificate /certs/tls.crt"
    );
}

#[test]
fn unparsable_certificate_is_rejected_with_the_reason() {
    let (_, key) = pair();
    let bogus = "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n";
    let m = message(check(bogus, &key));
    assert!(
        m.starts_with("certificate /certs/tls.crt with private key /certs/tls.key is unusable: "),
        "{m}"
    );
}

#[tokio::test]
async fn missing_files() {
    let e = read(
        PemFile::PrivateKey,
        Path::new("/nonexistent/svcplane/tls.key"),
    )
    .await
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "private key file /nonexistent/svcplane/tls.key does not exist"
    );
    let e = read(PemFile::Certificate, Path::new("/"))
        .await
        .unwrap_err();
    assert!(
        e.to_string().starts_with("cannot read certificate file /"),
        "{e}"
    );
}
