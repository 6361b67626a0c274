//! The webhook's own metrics, registered into the process registry by whoever serves
//! `/metrics` (`svcplane run` and `svcplane webhook` both do).
//!
//! They say what the API server's `apiserver_admission_webhook_*` metrics cannot: what
//! each review was answered (by endpoint, operation and verdict, denials by cause) and
//! how long it took; how claims come and go, so a range that stops shrinking back after
//! deletes is visible before it is exhausted; when the serving certificate expires;
//! and how full each range is, under kube-apiserver's own
//! allocator metric names and labels (`kube_apiserver_clusterip_allocator_*` per CIDR,
//! `kube_apiserver_nodeport_allocator_*`), so dashboards written for those keep
//! working when svcplane allocates.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::TypedMetric;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use svcplane_allocator::view::SvcView;
use svcplane_allocator::{Claim, IpFamily};
use tracing::warn;

use crate::state::AllocationState;

/// A range counts as nearly full from this share of used addresses on.
pub const NEARLY_FULL: f64 = 0.9;

/// Label of the per-CIDR ClusterIP gauges (upstream's `cidr`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CidrLabels {
    pub cidr: String,
}

/// Labels of the per-CIDR ClusterIP counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CidrScopeLabels {
    pub cidr: String,
    /// `static` (the user chose the value) or `dynamic`.
    pub scope: &'static str,
}

/// Label of the NodePort counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScopeLabels {
    pub scope: &'static str,
}

/// Range capacity and allocations, as kube-apiserver's allocators report them.
#[derive(Clone, Debug, Default)]
pub struct CapacityMetrics {
    pub ip_allocated: Family<CidrLabels, Gauge>,
    pub ip_available: Family<CidrLabels, Gauge>,
    pub ip_allocations: Family<CidrScopeLabels, Counter>,
    pub ip_errors: Family<CidrScopeLabels, Counter>,
    pub port_allocated: Gauge,
    pub port_available: Gauge,
    pub port_allocations: Family<ScopeLabels, Counter>,
    pub port_errors: Family<ScopeLabels, Counter>,
    /// Values held by Services or claims, as this replica's state sees them (exported
    /// as `svcplane_webhook_values_held{kind}`).
    pub values_held: Family<KindLabels, Gauge>,
    /// Of those, the values retained for deleted Services (`--retain-released-values`;
    /// exported as `svcplane_webhook_values_retained{kind}`).
    pub values_retained: Family<KindLabels, Gauge>,
    /// Ranges (CIDR, or `nodeports`) last seen nearly full, for the crossing notice.
    nearly_full: Arc<Mutex<HashMap<String, bool>>>,
}

/// Label of [`WebhookMetrics::claims_released`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReleaseLabels {
    /// Why: `service_gone` (its Service was deleted or dropped the value),
    /// `unused` (no Service took it within the grace period), `malformed`.
    pub reason: &'static str,
}

/// Labels of [`WebhookMetrics::reviews`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReviewLabels {
    /// `mutate` or `validate`.
    pub endpoint: &'static str,
    /// The request's operation (`CREATE`, `UPDATE`, ...), `unknown` when the body was
    /// not a Service review.
    pub operation: String,
    /// `allowed` (unchanged), `patched` (values assigned), `denied` (HTTP 4xx in the
    /// answer's status: the user's request is wrong), `error` (5xx, or a review the
    /// webhook could not read).
    pub verdict: &'static str,
}

/// Labels of [`WebhookMetrics::denials`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DenialLabels {
    pub endpoint: &'static str,
    /// The first cause's type (`FieldValueInvalid`, `FieldValueDuplicate`,
    /// `FieldValueRequired`, ...), else the status reason (`Invalid`, ...).
    pub reason: String,
}

/// Label of [`WebhookMetrics::review_duration`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub endpoint: &'static str,
}

/// Label of [`WebhookMetrics::values_held`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// `clusterip` or `nodeport`.
    pub kind: &'static str,
}

/// Upper bounds of the review latency histogram: the API server gives up at the
/// configuration's `timeoutSeconds` (5 in the chart), so the buckets end past it.
const REVIEW_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

fn review_histogram() -> Histogram {
    Histogram::new(REVIEW_BUCKETS)
}

/// The serving certificate, read at every scrape: its expiry and how often it changed.
/// Empty until a server is listening with a certificate.
#[derive(Clone, Debug, Default)]
pub struct CertMetrics {
    served: Arc<OnceLock<Arc<crate::tls::CertStatus>>>,
}

impl CertMetrics {
    /// Report on `status` from now on (the first call wins; one server per process).
    pub fn serving(&self, status: Arc<crate::tls::CertStatus>) {
        let _ = self.served.set(status);
    }
}

impl Collector for CertMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(status) = self.served.get() else {
            return Ok(());
        };
        if let Some(not_after) = status.not_after() {
            let gauge = ConstGauge::new(not_after);
            let metric = encoder.encode_descriptor(
                "certificate_not_after",
                "Expiry of the certificate the webhook serves (Unix time)",
                Some(&Unit::Seconds),
                ConstGauge::<i64>::TYPE,
            )?;
            gauge.encode(metric)?;
        }
        let reloads = ConstCounter::new(status.reloads());
        let metric = encoder.encode_descriptor(
            "certificate_reloads",
            "Times a changed serving certificate replaced the served one",
            None,
            ConstCounter::<u64>::TYPE,
        )?;
        reloads.encode(metric)?;
        let failed = ConstCounter::new(status.failed_reloads());
        let metric = encoder.encode_descriptor(
            "certificate_reload_failures",
            "Certificate reloads that failed (unreadable or unusable pair; the old one stays)",
            None,
            ConstCounter::<u64>::TYPE,
        )?;
        failed.encode(metric)
    }
}

/// Counters of one webhook; cheap to clone (the counters are shared).
#[derive(Clone, Debug)]
pub struct WebhookMetrics {
    /// Reviews answered.
    pub reviews: Family<ReviewLabels, Counter>,
    /// Denied reviews by cause.
    pub denials: Family<DenialLabels, Counter>,
    /// Time from the body read to the answer.
    pub review_duration: Family<EndpointLabels, Histogram>,
    /// Claims this replica created (values it handed out through the API).
    pub claims_created: Counter,
    /// Claims found taken by another Service's request (a race lost to another
    /// replica, or a value already handed out): the review runs again.
    pub claim_races_lost: Counter,
    /// The serving certificate.
    pub cert: CertMetrics,
    /// Range capacity (upstream's allocator metrics).
    pub capacity: CapacityMetrics,
    /// Claims deleted by the repair loop, by reason.
    pub claims_released: Family<ReleaseLabels, Counter>,
    /// Claims of deleted Services taken over by a request that wanted their value.
    pub claims_taken_over: Counter,
    /// Values retained for a deleted Service given back to the Service created again
    /// under its name.
    pub values_given_back: Counter,
    /// Repair passes that ran (skipped ones are not counted).
    pub repair_passes: Counter,
}

impl Default for WebhookMetrics {
    fn default() -> Self {
        Self {
            reviews: Family::default(),
            denials: Family::default(),
            review_duration: Family::new_with_constructor(review_histogram),
            claims_created: Counter::default(),
            claim_races_lost: Counter::default(),
            cert: CertMetrics::default(),
            capacity: CapacityMetrics::default(),
            claims_released: Family::default(),
            claims_taken_over: Counter::default(),
            values_given_back: Counter::default(),
            repair_passes: Counter::default(),
        }
    }
}

impl WebhookMetrics {
    /// Register every metric under `registry` (names are prefixed `webhook_`).
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("webhook");
        r.register(
            "claims_released",
            "AllocationClaims deleted by the claim repair loop, by reason",
            self.claims_released.clone(),
        );
        r.register(
            "claims_taken_over",
            "AllocationClaims of deleted Services replaced by a request that wanted their value",
            self.claims_taken_over.clone(),
        );
        r.register(
            "values_given_back",
            "Values retained for a deleted Service given back to the Service created again under its name",
            self.values_given_back.clone(),
        );
        r.register(
            "claim_repair_passes",
            "Claim repair passes run (a pass is skipped while the Service or claim watch is out of sync)",
            self.repair_passes.clone(),
        );
        r.register(
            "reviews",
            "AdmissionReviews answered, by endpoint, operation and verdict",
            self.reviews.clone(),
        );
        r.register(
            "denials",
            "AdmissionReviews denied, by endpoint and cause",
            self.denials.clone(),
        );
        r.register_with_unit(
            "review_duration",
            "Time to answer one AdmissionReview, claims through the API included",
            Unit::Seconds,
            self.review_duration.clone(),
        );
        r.register(
            "claims_created",
            "AllocationClaims this replica created for the values it handed out",
            self.claims_created.clone(),
        );
        r.register(
            "claim_races_lost",
            "Claims found already taken for another Service (the review runs again)",
            self.claim_races_lost.clone(),
        );
        r.register(
            "values_held",
            "ClusterIPs and NodePorts held by Services or claims, as this replica sees them",
            self.capacity.values_held.clone(),
        );
        r.register(
            "values_retained",
            "Of the values held, those retained for deleted Services (--retain-released-values)",
            self.capacity.values_retained.clone(),
        );
        r.register_collector(Box::new(self.cert.clone()));
    }

    /// Count one answered review; `answer` is what goes back to the API server.
    pub fn reviewed(
        &self,
        endpoint: crate::handler::Endpoint,
        operation: Option<&str>,
        answer: &crate::handler::Answer,
        seconds: f64,
    ) {
        let endpoint = endpoint.label();
        let (verdict, reason) = verdict_of(answer);
        self.reviews
            .get_or_create(&ReviewLabels {
                endpoint,
                operation: operation.unwrap_or("unknown").to_owned(),
                verdict,
            })
            .inc();
        if let Some(reason) = reason {
            self.denials
                .get_or_create(&DenialLabels { endpoint, reason })
                .inc();
        }
        self.review_duration
            .get_or_create(&EndpointLabels { endpoint })
            .observe(seconds);
    }

    /// Register the capacity metrics under upstream's names, at the root of `root`.
    pub fn register_capacity(&self, root: &mut Registry) {
        let c = &self.capacity;
        let ip = root
            .sub_registry_with_prefix("kube_apiserver")
            .sub_registry_with_prefix("clusterip_allocator");
        ip.register(
            "allocated_ips",
            "Gauge measuring the number of allocated IPs for Services",
            c.ip_allocated.clone(),
        );
        ip.register(
            "available_ips",
            "Gauge measuring the number of available IPs for Services",
            c.ip_available.clone(),
        );
        ip.register(
            "allocation",
            "Number of Cluster IPs allocations",
            c.ip_allocations.clone(),
        );
        ip.register(
            "allocation_errors",
            "Number of errors trying to allocate Cluster IPs",
            c.ip_errors.clone(),
        );
        let port = root
            .sub_registry_with_prefix("kube_apiserver")
            .sub_registry_with_prefix("nodeport_allocator");
        port.register(
            "allocated_ports",
            "Gauge measuring the number of allocated NodePorts for Services",
            c.port_allocated.clone(),
        );
        port.register(
            "available_ports",
            "Gauge measuring the number of available NodePorts for Services",
            c.port_available.clone(),
        );
        port.register(
            "allocation",
            "Number of NodePort allocations",
            c.port_allocations.clone(),
        );
        port.register(
            "allocation_errors",
            "Number of errors trying to allocate NodePort",
            c.port_errors.clone(),
        );
    }

    /// Count one released claim.
    pub fn released(&self, reason: &'static str) {
        self.claims_released
            .get_or_create(&ReleaseLabels { reason })
            .inc();
    }
}

/// The verdict of an answer, and the cause of a denial. Read back from the encoded
/// answer, so every path that builds one is counted the same way.
fn verdict_of(answer: &crate::handler::Answer) -> (&'static str, Option<String>) {
    if answer.status != 200 {
        return ("error", None);
    }
    let Ok(review) = serde_json::from_slice::<serde_json::Value>(&answer.body) else {
        return ("error", None);
    };
    let response = &review["response"];
    if response["allowed"].as_bool() == Some(true) {
        let patched = response["patch"].as_str().is_some_and(|p| !p.is_empty());
        return (if patched { "patched" } else { "allowed" }, None);
    }
    let status = &response["status"];
    if status["code"].as_u64().unwrap_or(500) >= 500 {
        return ("error", None);
    }
    let reason = status["details"]["causes"][0]["reason"]
        .as_str()
        .or_else(|| status["reason"].as_str())
        .unwrap_or("unknown");
    ("denied", Some(reason.to_owned()))
}

impl CapacityMetrics {
    /// Set the gauges from `state` (every range, ready or not), and log once when a
    /// range passes [`NEARLY_FULL`].
    pub fn refresh(&self, state: &AllocationState) {
        let a = state.allocators();
        let mut ips: u64 = 0;
        for fam in [IpFamily::V4, IpFamily::V6] {
            for r in a.family(fam).map(|f| f.ranges()).into_iter().flatten() {
                ips = ips.saturating_add(r.used());
                let cidr = r.cidr().to_string();
                let labels = CidrLabels { cidr: cidr.clone() };
                self.ip_allocated
                    .get_or_create(&labels)
                    .set(i64::try_from(r.used()).unwrap_or(i64::MAX));
                self.ip_available
                    .get_or_create(&labels)
                    .set(i64::try_from(r.free()).unwrap_or(i64::MAX));
                self.note_fill(&cidr, r.used(), r.size());
            }
        }
        let p = a.node_ports();
        self.port_allocated
            .set(i64::try_from(p.used()).unwrap_or(i64::MAX));
        self.port_available
            .set(i64::try_from(p.free()).unwrap_or(i64::MAX));
        self.note_fill("nodeports", p.used(), p.used() + p.free());
        self.values_held
            .get_or_create(&KindLabels { kind: "clusterip" })
            .set(i64::try_from(ips).unwrap_or(i64::MAX));
        self.values_held
            .get_or_create(&KindLabels { kind: "nodeport" })
            .set(i64::try_from(p.used()).unwrap_or(i64::MAX));
        let retained = state.retained_claims();
        let ips = retained
            .iter()
            .filter(|r| matches!(r.value, Claim::Ip(_)))
            .count();
        for (kind, n) in [("clusterip", ips), ("nodeport", retained.len() - ips)] {
            self.values_retained
                .get_or_create(&KindLabels { kind })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    fn note_fill(&self, range: &str, used: u64, size: u64) {
        let full = size > 0 && used as f64 >= NEARLY_FULL * size as f64;
        let mut seen = self
            .nearly_full
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let was = seen.insert(range.to_owned(), full).unwrap_or(false);
        if full && !was {
            warn!(range, used, size, "range is over 90% full");
        }
    }

    /// Count the values a successful (not dry-run) mutation took: `static` when the
    /// request named the value, else `dynamic`; ClusterIPs per CIDR holding them.
    pub fn allocated(&self, state: &AllocationState, before: &SvcView, values: &[Claim]) {
        for v in values {
            let scope = if named_by(before, *v) {
                "static"
            } else {
                "dynamic"
            };
            match v {
                Claim::Ip(ip) => {
                    if let Some(cidr) = cidr_of(state, *ip) {
                        self.ip_allocations
                            .get_or_create(&CidrScopeLabels { cidr, scope })
                            .inc();
                    }
                }
                Claim::NodePort(_) => {
                    self.port_allocations
                        .get_or_create(&ScopeLabels { scope })
                        .inc();
                }
            }
        }
    }

    /// Count an allocation the webhook refused: a taken value the request named (on
    /// the range holding it), or a full range (on every ready range of the family,
    /// as each of upstream's allocators counts its own failure).
    pub fn refused(&self, state: &AllocationState, before: &SvcView, message: &str) {
        if message.contains("failed to allocate a serviceIP: range is full") {
            let a = state.allocators();
            for fam in [IpFamily::V4, IpFamily::V6] {
                let Some(f) = a.family(fam) else { continue };
                let ready: Vec<_> = f.ranges().iter().filter(|r| r.is_ready()).collect();
                if !ready.is_empty() && ready.iter().all(|r| r.free() == 0) {
                    for r in ready {
                        self.ip_errors
                            .get_or_create(&CidrScopeLabels {
                                cidr: r.cidr().to_string(),
                                scope: "dynamic",
                            })
                            .inc();
                    }
                }
            }
            return;
        }
        if message.contains("failed to allocate a nodePort: range is full") {
            self.port_errors
                .get_or_create(&ScopeLabels { scope: "dynamic" })
                .inc();
            return;
        }
        if !message.contains("already allocated") {
            return;
        }
        for v in claims_named_by(before) {
            if !state.allocators().has(v) {
                continue;
            }
            match v {
                Claim::Ip(ip) => {
                    if let Some(cidr) = cidr_of(state, ip) {
                        self.ip_errors
                            .get_or_create(&CidrScopeLabels {
                                cidr,
                                scope: "static",
                            })
                            .inc();
                    }
                }
                Claim::NodePort(_) => {
                    self.port_errors
                        .get_or_create(&ScopeLabels { scope: "static" })
                        .inc();
                }
            }
        }
    }
}

/// The first range holding `ip` (upstream's `metricLabel` of its allocator).
fn cidr_of(state: &AllocationState, ip: std::net::IpAddr) -> Option<String> {
    state
        .allocators()
        .family(IpFamily::of(&ip))?
        .ranges()
        .iter()
        .find(|r| r.offset_of(ip).is_some())
        .map(|r| r.cidr().to_string())
}

/// The values the request itself names.
fn claims_named_by(v: &SvcView) -> Vec<Claim> {
    svcplane_allocator::service::claims_of(v)
}

fn named_by(v: &SvcView, c: Claim) -> bool {
    claims_named_by(v).contains(&c)
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;

    fn state() -> AllocationState {
        AllocationState::new(
            svcplane_allocator::AllocatorConfig::from_flags("10.0.0.0/29", "30000-30001")
                .unwrap()
                .allocators(1)
                .unwrap(),
        )
    }

    fn text(m: &WebhookMetrics) -> String {
        let mut r = Registry::default();
        m.register_capacity(&mut r);
        let mut out = String::new();
        encode(&mut out, &r).unwrap();
        out
    }

    fn view(spec: serde_json::Value) -> SvcView {
        let svc: k8s_openapi::api::core::v1::Service =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "s"}, "spec": spec}))
                .unwrap();
        SvcView::from_service(&svc)
    }

    #[test]
    fn capacity_uses_upstreams_names_and_labels() {
        let m = WebhookMetrics::default();
        let mut st = state();
        let ip = Claim::Ip("10.0.0.3".parse().unwrap());
        st.set(
            crate::state::HolderKey::Service {
                namespace: "ns".into(),
                name: "a".into(),
            },
            None,
            vec![ip, Claim::NodePort(30000)],
        );
        m.capacity.refresh(&st);
        m.capacity.allocated(
            &st,
            &view(serde_json::json!({"clusterIP": "10.0.0.3", "ports": [{"port": 80}]})),
            &[ip, Claim::NodePort(30000)],
        );
        let t = text(&m);
        for needle in [
            "kube_apiserver_clusterip_allocator_allocated_ips{cidr=\"10.0.0.0/29\"} 1",
            "kube_apiserver_clusterip_allocator_available_ips{cidr=\"10.0.0.0/29\"} 5",
            "kube_apiserver_clusterip_allocator_allocation_total{cidr=\"10.0.0.0/29\",scope=\"static\"} 1",
            "kube_apiserver_nodeport_allocator_allocated_ports 1",
            "kube_apiserver_nodeport_allocator_available_ports 1",
            "kube_apiserver_nodeport_allocator_allocation_total{scope=\"dynamic\"} 1",
        ] {
            assert!(t.contains(needle), "missing {needle:?} in\n{t}");
        }
    }

    #[test]
    fn a_full_range_counts_an_error_on_every_ready_range_of_the_family() {
        let m = WebhookMetrics::default();
        let mut st = state();
        let all: Vec<Claim> = (1..=6)
            .map(|i| Claim::Ip(format!("10.0.0.{i}").parse().unwrap()))
            .collect();
        st.set(
            crate::state::HolderKey::Service {
                namespace: "ns".into(),
                name: "a".into(),
            },
            None,
            all,
        );
        m.capacity.refused(
            &st,
            &view(serde_json::json!({"ports": [{"port": 80}]})),
            "Internal error occurred: failed to allocate a serviceIP: range is full",
        );
        m.capacity.refresh(&st);
        let t = text(&m);
        assert!(
            t.contains("kube_apiserver_clusterip_allocator_allocation_errors_total{cidr=\"10.0.0.0/29\",scope=\"dynamic\"} 1"),
            "{t}"
        );
        assert!(
            t.contains("kube_apiserver_clusterip_allocator_available_ips{cidr=\"10.0.0.0/29\"} 0")
        );
    }

    fn own_text(m: &WebhookMetrics) -> String {
        let mut r = Registry::default();
        m.register(r.sub_registry_with_prefix("svcplane"));
        let mut out = String::new();
        encode(&mut out, &r).unwrap();
        out
    }

    fn review_answer(response: serde_json::Value) -> crate::handler::Answer {
        crate::handler::Answer {
            status: 200,
            body: serde_json::to_vec(&serde_json::json!({"response": response})).unwrap(),
        }
    }

    #[test]
    fn reviews_are_counted_by_endpoint_operation_and_verdict() {
        use crate::handler::{Answer, Endpoint};
        let m = WebhookMetrics::default();
        let patched = review_answer(serde_json::json!({"allowed": true, "patch": "W10="}));
        let allowed = review_answer(serde_json::json!({"allowed": true}));
        let denied = review_answer(serde_json::json!({"allowed": false, "status": {
            "code": 422, "reason": "Invalid",
            "details": {"causes": [{"reason": "FieldValueDuplicate", "field": "spec.clusterIPs"}]}}}));
        let failed = review_answer(serde_json::json!({"allowed": false, "status": {"code": 500}}));
        m.reviewed(Endpoint::Mutate, Some("CREATE"), &patched, 0.003);
        m.reviewed(Endpoint::Mutate, Some("CREATE"), &patched, 0.004);
        m.reviewed(Endpoint::Validate, Some("UPDATE"), &allowed, 0.0001);
        m.reviewed(Endpoint::Validate, Some("CREATE"), &denied, 0.0002);
        m.reviewed(Endpoint::Mutate, Some("CREATE"), &failed, 4.5);
        m.reviewed(Endpoint::Mutate, None, &Answer::error(400, "bad"), 0.0);
        let t = own_text(&m);
        for line in [
            r#"svcplane_webhook_reviews_total{endpoint="mutate",operation="CREATE",verdict="patched"} 2"#,
            r#"svcplane_webhook_reviews_total{endpoint="validate",operation="UPDATE",verdict="allowed"} 1"#,
            r#"svcplane_webhook_reviews_total{endpoint="validate",operation="CREATE",verdict="denied"} 1"#,
            r#"svcplane_webhook_reviews_total{endpoint="mutate",operation="CREATE",verdict="error"} 1"#,
            r#"svcplane_webhook_reviews_total{endpoint="mutate",operation="unknown",verdict="error"} 1"#,
            r#"svcplane_webhook_denials_total{endpoint="validate",reason="FieldValueDuplicate"} 1"#,
            r#"svcplane_webhook_review_duration_seconds_count{endpoint="mutate"} 4"#,
            r#"svcplane_webhook_review_duration_seconds_bucket{le="5.0",endpoint="mutate"} 4"#,
            r#"svcplane_webhook_review_duration_seconds_bucket{le="2.5",endpoint="mutate"} 3"#,
        ] {
            assert!(t.contains(line), "missing {line} in:\n{t}");
        }
        // No certificate served yet: no expiry series.
        assert!(!t.contains("certificate_not_after"), "{t}");
    }

    #[test]
    fn the_served_certificate_expiry_and_reloads_are_exported() {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(cert.cert.pem().as_bytes()).unwrap();
        let not_after = pem.parse_x509().unwrap().validity().not_after.timestamp();
        assert!(not_after > 0);
        let m = WebhookMetrics::default();
        let tls = crate::tls::CertReloader::from_pem(
            "test",
            cert.cert.pem().as_bytes(),
            cert.signing_key.serialize_pem().as_bytes(),
        )
        .unwrap();
        m.cert.serving(tls.status());
        let t = own_text(&m);
        assert!(
            t.contains(&format!(
                "svcplane_webhook_certificate_not_after_seconds {not_after}"
            )),
            "{t}"
        );
        assert!(
            t.contains("svcplane_webhook_certificate_reloads_total 0"),
            "{t}"
        );
        assert!(
            t.contains("svcplane_webhook_certificate_reload_failures_total 0"),
            "{t}"
        );
    }
}
