//! The `allocator-repair` controller: what kube-apiserver's ClusterIP and NodePort
//! repair loops report (AL-12), for clusters where svcplane allocates.
//!
//! Every `--allocator-repair-interval` the leader rebuilds the allocator from the
//! cached Services and records each finding (duplicate, out-of-range or invalid
//! ClusterIPs and nodePorts) as a Warning event on its Service with upstream's reason
//! and message. Nothing is changed: upstream's remedy for all of these is "please
//! recreate service". (The webhook's claim repair is the webhook's own loop, run on
//! the leader whether this controller runs or not.)

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use svcplane_allocator::service_cidrs::ServiceCidrView;
use svcplane_allocator::{AllocatorConfig, Finding};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::core::event::PlannedEvent;
use crate::shell::cache::Cache;
use crate::shell::controllers::Controller;
use crate::shell::events::{EventRecord, EventRecorder, object_reference};
use crate::shell::flag_group::{FlagGroup, Shared};
use tokio::task::JoinHandle;

/// The `--help` heading of this controller's flags, shared with the webhook's.
pub(crate) const HEADING: &str = "Allocator & webhook";

/// The allocator repair controller's flags, flattened into `run` (the ranges it
/// checks against are the webhook's).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct AllocatorRepairFlags {
    /// How often the allocator repair looks for duplicate and out-of-range values.
    #[arg(long, value_name = "DURATION", env = "SVCPLANE_ALLOCATOR_REPAIR_INTERVAL",
          default_value = "3m", value_parser = crate::duration::parse_positive_duration,
          help_heading = HEADING)]
    pub allocator_repair_interval: Duration,
}

impl FlagGroup for AllocatorRepairFlags {
    type Config = Config;

    /// The ranges checked are the allocator's (the webhook's flags).
    fn config(&self, _all: &clap::ArgMatches, shared: &Shared) -> Result<Config, clap::Error> {
        Ok(Config {
            allocator: shared.allocator.clone(),
            follow_service_cidrs: shared.follow_service_cidrs,
            interval: self.allocator_repair_interval,
            seed: shared.seed,
        })
    }
}

/// Settings of the repair controller.
#[derive(Debug, Clone)]
pub struct Config {
    /// The configured ranges (`--service-cluster-ip-range`, `--service-node-port-range`).
    pub allocator: AllocatorConfig,
    /// Take the ClusterIP ranges from the cluster's ServiceCIDR objects when it has any.
    pub follow_service_cidrs: bool,
    pub interval: Duration,
    pub seed: u64,
}

/// The findings of one pass over `services` against the cluster's ServiceCIDRs (when
/// followed and present) or the configured ranges (pure; the allocator's rules).
pub(crate) fn findings(
    services: &[Service],
    service_cidrs: &[ServiceCidrView],
    config: &Config,
) -> Result<Vec<Finding>, String> {
    let from_cluster = config
        .follow_service_cidrs
        .then(|| config.allocator.with_service_cidrs(service_cidrs))
        .flatten();
    let ranges = from_cluster.as_ref().unwrap_or(&config.allocator);
    svcplane_allocator::repair_findings(services, ranges, config.seed)
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
        event_type: f.event_type.into(),
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
        f.component(),
        action,
        &planned,
    ));
}

/// The controller: a timer, the cached Services, the event recorder.
#[derive(Debug)]
pub(crate) struct AllocatorRepair {
    cache: Arc<Cache>,
    events: EventRecorder,
    config: Config,
}

impl AllocatorRepair {
    pub(crate) fn new(cache: Arc<Cache>, events: EventRecorder, config: Config) -> Self {
        Self {
            cache,
            events,
            config,
        }
    }
}

impl super::Registered for AllocatorRepair {
    type Flags = AllocatorRepairFlags;

    fn build(b: &super::Build<'_>, config: Config) -> Self {
        Self::new(b.cache.clone(), b.events.clone(), config)
    }
}

impl Controller for AllocatorRepair {
    fn start(self: Arc<Self>, stop: &CancellationToken) -> Vec<JoinHandle<()>> {
        vec![tokio::spawn(run(
            self.cache.clone(),
            self.events.clone(),
            self.config.clone(),
            stop.clone(),
        ))]
    }
}

/// Runs passes until `cancel`; the runtime starts it once the Service cache listed.
async fn run(cache: Arc<Cache>, events: EventRecorder, config: Config, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(config.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
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
        let service_cidrs: Vec<ServiceCidrView> = cache
            .service_cidrs
            .read()
            .iter()
            .map(|c| ServiceCidrView::of(c))
            .collect();
        match findings(&services, &service_cidrs, &config) {
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
            follow_service_cidrs: true,
            interval: Duration::from_secs(180),
            seed: 1,
        };
        let services = vec![
            svc("a").cluster_ip("10.96.0.10").build(),
            svc("b").cluster_ip("10.96.0.10").build(),
            svc("c").cluster_ip("192.168.0.1").build(),
            svc("d").cluster_ip("10.96.0.11").build(),
        ];
        let found = findings(&services, &[], &config).unwrap();
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
        assert_eq!(found[0].component(), "ipallocator-repair-controller");
    }

    #[test]
    fn rule_12_ranges_follow_the_clusters_service_cidrs() {
        let mut config = Config {
            allocator: AllocatorConfig::from_flags("10.96.0.0/16", "30000-32767").unwrap(),
            follow_service_cidrs: true,
            interval: Duration::from_secs(180),
            seed: 1,
        };
        let services = vec![svc("a").cluster_ip("10.97.0.10").build()];
        let cidrs = [
            ServiceCidrView {
                name: "kubernetes".into(),
                cidrs: vec!["10.96.0.0/16".into()],
                ready_condition: true,
                deleting: false,
                namespace_selector: None,
            },
            ServiceCidrView {
                name: "extra".into(),
                cidrs: vec!["10.97.0.0/16".into()],
                ready_condition: true,
                deleting: false,
                namespace_selector: None,
            },
        ];
        assert!(findings(&services, &cidrs, &config).unwrap().is_empty());
        config.follow_service_cidrs = false;
        let found = findings(&services, &cidrs, &config).unwrap();
        assert_eq!(found[0].reason, "ClusterIPOutOfRange");
    }
}
