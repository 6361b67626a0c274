//! Fixtures shared by the webhook benches: the webhook they measure, over a state that
//! already holds 10 000 Services, with an in-memory claim store.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use svcplane_allocator::{AllocatorConfig, Claim};
use svcplane_webhook::claim::AllocationClaim;
use svcplane_webhook::shell::holders::SourceKind;
use svcplane_webhook::shell::watch::Readiness;
use svcplane_webhook::shell::{ClaimError, ClaimStore, Claimed, Webhook};
use svcplane_webhook::state::{AllocationState, HolderKey, ServiceRef};

/// Services the state holds before a bench starts.
pub(crate) const SERVICES: u32 = 10_000;

/// Claims made through [`CountingClaims`] (the validating path must make none).
pub(crate) static CLAIMS: AtomicUsize = AtomicUsize::new(0);

/// Claims that always win, counted (the API round trip is not what the benches
/// measure).
pub(crate) struct CountingClaims;

impl ClaimStore for CountingClaims {
    async fn claim(&self, claim: AllocationClaim) -> Result<Claimed, ClaimError> {
        CLAIMS.fetch_add(1, Ordering::Relaxed);
        Ok(Claimed::Won(Box::new(claim)))
    }

    async fn release(&self, _claim: &AllocationClaim) {}
}

/// The allocation state: 10.96.0.0/12 and 30000-32767, with [`SERVICES`] Services in
/// namespace `bench` holding one ClusterIP each.
pub(crate) fn held_state() -> Arc<Mutex<AllocationState>> {
    let allocators = AllocatorConfig::from_flags("10.96.0.0/12", "30000-32767")
        .expect("ranges")
        .allocators(1)
        .expect("allocators");
    let mut st = AllocationState::new(allocators);
    for i in 0..SERVICES {
        let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 96, 0, 10)) + i);
        let name = format!("svc-{i}");
        st.set(
            HolderKey::Service {
                namespace: "bench".into(),
                name: name.clone(),
            },
            Some(ServiceRef::named("bench", &name)),
            vec![Claim::Ip(ip.into())],
        );
    }
    Arc::new(Mutex::new(st))
}

/// The real webhook over `state`, with every watched source marked loaded.
pub(crate) fn webhook(state: Arc<Mutex<AllocationState>>) -> Webhook<CountingClaims> {
    let readiness = Arc::new(Readiness::default());
    for kind in [
        SourceKind::Services,
        SourceKind::Claims,
        SourceKind::IpAddresses,
    ] {
        readiness.listed(kind);
    }
    Webhook::new(state, CountingClaims, readiness, Default::default())
}
