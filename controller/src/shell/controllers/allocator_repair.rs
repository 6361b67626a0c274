//! The `allocator-repair` controller: what kube-apiserver's ClusterIP and NodePort
//! repair loops report (AL-12), for clusters where svcplane allocates.
//!
//! Every `--allocator-repair-interval` the leader rebuilds the allocator from the
//! cached Services and records each finding (duplicate, out-of-range or invalid
//! ClusterIPs and nodePorts) as a Warning event on its Service with upstream's reason
//! and message. Nothing is changed: upstream's remedy for all of these is "please
//! recreate service". The webhook's claim repair (releasing AllocationClaims no
//! Service holds) runs beside it on the leader only, so two replicas never race to
//! delete the same claims.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use svcplane_allocator::{AllocatorConfig, Finding, rebuild};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::core::event::{EventType, PlannedEvent};
use crate::shell::cache::Cache;
use crate::shell::events::{EventRecord, EventRecorder, object_reference};

/// Settings of the repair controller.
#[derive(Debug, Clone)]
pub struct Config {
    pub allocator: AllocatorConfig,
    pub interval: Duration,
    pub seed: u64,
}

/// Upstream's component names for the two repair loops.
fn component(reason: &str) -> &'static str {
    if reason.starts_with("Port") {
        "portallocator-repair-controller"
    } else {
        "ipallocator-repair-controller"
    }
}

/// The findings of one pass over `services` (pure).
pub fn findings(services: &[Service], config: &Config) -> Result<Vec<Finding>, String> {
    let mut allocators = config.allocator.allocators(config.seed)?;
    Ok(rebuild(&mut allocators, services).findings)
}

fn record(events: &EventRecorder, cache: &Cache, f: &Finding) {
    if f.kind != "Service" {
        return;
    }
    let (namespace, name) = f.object.split_once('/').unwrap_or(("", f.object.as_str()));
    let uid = {
        use crate::shell::cache::Store;
        cache
            .services
            .read()
            .get(namespace, name)
            .and_then(|s| s.metadata.uid.clone())
    };
    let planned = PlannedEvent {
        event_type: if f.event_type == "Normal" {
            EventType::Normal
        } else {
            EventType::Warning
        },
        reason: f.reason,
        message: f.message.clone(),
    };
    let action = if f.action.is_empty() {
        "PortAllocation"
    } else {
        f.action
    };
    events.record(EventRecord::from_planned(
        object_reference("v1", "Service", namespace, name, uid.as_deref()),
        component(f.reason),
        action,
        &planned,
    ));
}

/// Runs passes until `cancel`; the first once the Service cache is synced.
pub async fn run(
    cache: Arc<Cache>,
    events: EventRecorder,
    config: Config,
    cancel: CancellationToken,
) {
    let mut tick = tokio::time::interval(config.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        if !cache.services.is_synced() {
            continue;
        }
        let services: Vec<Service> = {
            use crate::shell::cache::Store;
            cache
                .services
                .read()
                .all()
                .iter()
                .map(|s| Service::clone(s))
                .collect()
        };
        match findings(&services, &config) {
            Ok(found) => {
                debug!(
                    services = services.len(),
                    findings = found.len(),
                    "allocator repair pass"
                );
                for f in &found {
                    record(&events, &cache, f);
                }
            }
            Err(e) => warn!(error = e, "allocator repair: ranges unusable"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fixtures::svc;

    #[test]
    fn rule_12_duplicate_and_out_of_range_cluster_ips_are_found() {
        let config = Config {
            allocator: AllocatorConfig::from_flags("10.96.0.0/16", "30000-32767").unwrap(),
            interval: Duration::from_secs(180),
            seed: 1,
        };
        let services = vec![
            svc("a").cluster_ip("10.96.0.10").build(),
            svc("b").cluster_ip("10.96.0.10").build(),
            svc("c").cluster_ip("192.168.0.1").build(),
            svc("d").cluster_ip("10.96.0.11").build(),
        ];
        let found = findings(&services, &config).unwrap();
        let reasons: Vec<(&str, &str)> = found
            .iter()
            .map(|f| (f.reason, f.object.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [
                ("ClusterIPAlreadyAllocated", "default/b"),
                ("ClusterIPOutOfRange", "default/c")
            ]
        );
        assert_eq!(
            component("PortOutOfRange"),
            "portallocator-repair-controller"
        );
        assert_eq!(
            component("ClusterIPOutOfRange"),
            "ipallocator-repair-controller"
        );
    }
}
