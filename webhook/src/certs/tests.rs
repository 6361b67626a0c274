use super::*;

const T0: i64 = 1_800_000_000;
const HOUR: i64 = 3600;
const DAY: i64 = 24 * HOUR;

fn settings() -> Settings {
    Settings {
        hosts: service_hosts("svcplane-webhook", "kube-system"),
        ca_validity: Duration::from_secs((300 * DAY) as u64),
        cert_validity: Duration::from_secs((30 * DAY) as u64),
        settle: DEFAULT_SETTLE,
    }
}

fn created(at: i64) -> Material {
    let (m, why) = next(None, &settings(), at)
        .unwrap()
        .expect("something to create");
    assert_eq!(why, "no usable certificates yet");
    m
}

/// Run [`next`] at `at`, returning the new material (or the old one when kept) and
/// whether it changed.
fn step(m: &Material, at: i64) -> (Material, bool) {
    match next(Some(m), &settings(), at).unwrap() {
        Some((n, _)) => (n, true),
        None => (m.clone(), false),
    }
}

/// When `decide` first says `action` after `from`, scanning hour by hour.
fn first(m: &Material, from: i64, action: Action) -> i64 {
    let i = inspect(m).unwrap();
    (from..from + 2000 * DAY)
        .step_by(HOUR as usize)
        .find(|t| decide(Some(&i), &settings(), *t).0 == action)
        .expect("the action never comes")
}

#[test]
fn rule_14_1_nothing_usable_creates_a_ca_and_a_serving_certificate() {
    let m = created(T0);
    let i = inspect(&m).unwrap();
    assert_eq!(i.bundle.len(), 1);
    assert!(i.ca().is_ca && i.ca_key_matches);
    assert!(!i.cert.is_ca && i.cert_key_matches);
    assert_eq!(i.signed_by, Some(0));
    assert_eq!(
        i.cert.hosts,
        BTreeSet::from([
            "svcplane-webhook.kube-system.svc".to_owned(),
            "svcplane-webhook.kube-system.svc.cluster.local".to_owned()
        ])
    );
    assert_eq!(i.ca().not_before, T0 - HOUR, "backdated for clock skew");
    assert_eq!(i.ca().not_after, T0 + 300 * DAY);
    assert_eq!(i.cert.not_after, T0 + 30 * DAY);
    assert_eq!(decide(Some(&i), &settings(), T0), (Action::Keep, "current"));
    assert_eq!(next(Some(&m), &settings(), T0 + DAY).unwrap(), None);

    // Unusable contents are replaced entirely, and the log says why.
    let garbage = Material {
        cert: "not a certificate".into(),
        ..m.clone()
    };
    let (n, why) = next(Some(&garbage), &settings(), T0).unwrap().unwrap();
    assert!(why.contains("unusable") && why.contains("tls.crt"), "{why}");
    assert_ne!(n.ca_key, m.ca_key, "a new CA");
    // A CA key that is not the CA's: nothing can be signed, start over.
    let other = created(T0);
    let mismatched = Material {
        ca_key: other.ca_key.clone(),
        ..m.clone()
    };
    let i = inspect(&mismatched).unwrap();
    assert!(!i.ca_key_matches);
    assert_eq!(decide(Some(&i), &settings(), T0).0, Action::Create);
}

#[test]
fn rule_14_2_a_certificate_is_due_after_two_thirds_of_its_lifetime() {
    // Issued at 3600 (notBefore backdated by an hour), for 300 s.
    let c = CertInfo {
        not_before: 0,
        not_after: 3900,
        is_ca: false,
        hosts: BTreeSet::new(),
        subject: Vec::new(),
    };
    assert_eq!(c.issued(), 3600);
    assert!(!c.due(3799));
    assert!(c.due(3800));
    assert!(!c.expired(3899));
    assert!(c.expired(3900) && c.due(3900));
    // A certificate without svcplane's backdating counts from notBefore.
    let foreign = CertInfo {
        not_before: 0,
        not_after: 300,
        ..c.clone()
    };
    assert_eq!(foreign.issued(), 0);
    assert!(!foreign.due(199) && foreign.due(200));
    // The serving certificate of a fresh install is re-issued at two thirds of its 30
    // days; the CA is untouched.
    let m = created(T0);
    let at = first(&m, T0, Action::ReissueCert);
    let due = T0 + 30 * DAY * 2 / 3;
    assert_eq!(at, due);
    let (n, changed) = step(&m, at);
    assert!(changed);
    assert_eq!(n.ca_bundle, m.ca_bundle, "same CA");
    assert_eq!(n.ca_key, m.ca_key);
    assert_ne!(n.cert, m.cert);
    assert_ne!(n.key, m.key, "a new key with every certificate");
    assert_eq!(inspect(&n).unwrap().cert.not_after, at + 30 * DAY);
}

#[test]
fn rule_14_3_a_due_ca_is_replaced_and_the_old_one_stays_trusted() {
    let m = created(T0);
    let at = first(&m, T0, Action::RotateCa);
    assert_eq!(at, T0 + 300 * DAY * 2 / 3);
    // Keep the serving certificate fresh up to the rotation, as the loop would.
    let (m, _) = step(&m, at - 2 * DAY);
    let (n, changed) = step(&m, at);
    assert!(changed);
    let i = inspect(&n).unwrap();
    assert_eq!(i.bundle.len(), 2, "new CA first, old CA kept");
    assert_eq!(i.bundle[1], inspect(&m).unwrap().bundle[0]);
    assert_ne!(
        i.bundle[0].subject, i.bundle[1].subject,
        "the CAs have distinct names"
    );
    assert!(i.ca_key_matches);
    assert_eq!(n.cert, m.cert, "the serving certificate is kept for now");
    assert_eq!(
        i.signed_by,
        Some(1),
        "by the previous CA, still in the bundle"
    );
}

#[test]
fn rule_14_4_the_serving_certificate_moves_to_the_new_ca_only_after_it_settled() {
    let m = created(T0);
    let at = first(&m, T0, Action::RotateCa);
    let (m, _) = step(&m, at - 2 * DAY);
    let (rotated, _) = step(&m, at);
    // Right after the rotation the bundle is being published: no new certificate yet.
    let (same, changed) = step(&rotated, at + 60);
    assert!(!changed, "the new CA has not settled");
    assert_eq!(same, rotated);
    let settle = DEFAULT_SETTLE.as_secs() as i64;
    let (n, changed) = step(&rotated, at + settle);
    assert!(changed);
    let i = inspect(&n).unwrap();
    assert_eq!(i.signed_by, Some(0));
    assert_eq!(i.bundle.len(), 2, "the old CA stays until it expires");

    // Other reasons re-issue at once: other hosts, a key that is not the certificate's,
    // a certificate no CA of the bundle signed.
    let fresh = created(T0);
    let mut other_hosts = settings();
    other_hosts.hosts.push("127.0.0.1".into());
    let (re, why) = next(Some(&fresh), &other_hosts, T0).unwrap().unwrap();
    assert_eq!(why, "the serving certificate names other hosts");
    assert!(inspect(&re).unwrap().cert.hosts.contains("127.0.0.1"));
    let foreign = created(T0);
    let wrong_key = Material {
        key: foreign.key.clone(),
        ..fresh.clone()
    };
    assert_eq!(
        decide(Some(&inspect(&wrong_key).unwrap()), &settings(), T0).0,
        Action::ReissueCert
    );
    let stranger = Material {
        cert: foreign.cert.clone(),
        key: foreign.key.clone(),
        ..fresh.clone()
    };
    assert_eq!(
        decide(Some(&inspect(&stranger).unwrap()), &settings(), T0),
        (
            Action::ReissueCert,
            "no CA of the bundle signed the serving certificate"
        )
    );
}

#[test]
fn rule_14_5_the_serving_certificate_never_outlives_its_ca() {
    let mut s = settings();
    s.ca_validity = Duration::from_secs((20 * DAY) as u64);
    s.cert_validity = Duration::from_secs((365 * DAY) as u64);
    let (m, _) = next(None, &s, T0).unwrap().unwrap();
    let i = inspect(&m).unwrap();
    assert_eq!(i.cert.not_after, i.ca().not_after);
}

#[test]
fn rule_14_6_expired_cas_leave_the_bundle() {
    let m = created(T0);
    let rotation = first(&m, T0, Action::RotateCa);
    let (m, _) = step(&m, rotation - 2 * DAY);
    let (m, _) = step(&m, rotation);
    let (m, _) = step(&m, rotation + DEFAULT_SETTLE.as_secs() as i64);
    let old_end = inspect(&m).unwrap().bundle[1].not_after;
    // Walk forward as the loop would (hourly), until the old CA is gone.
    let mut cur = m;
    let mut t = rotation + DAY;
    while inspect(&cur).unwrap().bundle.len() == 2 {
        assert!(t <= old_end, "kept past its expiry");
        let (n, _) = step(&cur, t);
        cur = n;
        t += HOUR;
    }
    assert!(t > old_end, "dropped before it expired");
    let i = inspect(&cur).unwrap();
    assert_eq!(i.bundle.len(), 1);
    assert_eq!(i.signed_by, Some(0));
}

#[test]
fn the_material_round_trips_through_the_secret_data() {
    let m = created(T0);
    let data: std::collections::BTreeMap<String, Vec<u8>> = m
        .to_data()
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
        .collect();
    assert_eq!(Material::from_data(|k| data.get(k).cloned()), Some(m));
    assert_eq!(Material::from_data(|_| None), None);
}

#[test]
fn ip_hosts_are_compared_as_addresses() {
    let mut s = settings();
    s.hosts = vec!["127.0.0.1".into(), "::1".into(), "Webhook.Example".into()];
    let (m, _) = next(None, &s, T0).unwrap().unwrap();
    let i = inspect(&m).unwrap();
    assert_eq!(
        i.cert.hosts,
        BTreeSet::from(["127.0.0.1".into(), "::1".into(), "webhook.example".into()])
    );
    assert_eq!(decide(Some(&i), &s, T0).0, Action::Keep);
}

#[test]
fn a_self_signed_serving_certificate_names_its_hosts_and_lifetime() {
    let hosts = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let (cert, key) = self_signed(&hosts, Duration::from_secs((365 * DAY) as u64), T0).unwrap();
    let der = pems("tls.crt", &cert).unwrap();
    let c = info(&parse("tls.crt", &der[0]).unwrap());
    assert!(!c.is_ca);
    assert_eq!(
        c.hosts,
        BTreeSet::from(["localhost".to_owned(), "127.0.0.1".to_owned()])
    );
    assert_eq!(c.not_before, T0 - HOUR, "backdated for clock skew");
    assert_eq!(c.not_after, T0 + 365 * DAY);
    assert!(key.contains("PRIVATE KEY"));
    // A rustls server accepts the pair.
    assert!(crate::tls::CertReloader::from_pem("test", cert.as_bytes(), key.as_bytes()).is_ok());
}
