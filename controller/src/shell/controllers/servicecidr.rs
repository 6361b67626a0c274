//! The ServiceCIDR controller's shell (kube-controller-manager's
//! `service-cidr-controller`, off by default: kube-controller-manager runs it already
//! on most clusters). Reads a ServiceCIDR and the IPAddresses from the cache, calls the
//! pure core with the current time, and carries its writes out as upstream does: the
//! finalizer by strategic merge patch, the `Ready` condition by server-side apply of
//! the status with the field manager `service-cidr-controller`.

use std::sync::Arc;

use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::{Controller, Parts, SyncError, Syncer, spawn_workers};
use crate::core::event::PlannedEvent;
use crate::core::servicecidr::triggers::{keys_for_ip_address, keys_for_service_cidr};
use crate::core::servicecidr::{
    self as core_cidr, CONTROLLER_NAME, MSG_ERROR, REASON_ERROR, Sent, Write,
};
use crate::shell::cache::Store;
use crate::shell::events::{EventRecord, object_reference};
use crate::shell::flag_group::{FlagGroup, Shared};
use crate::shell::queue::{RateLimit, WorkQueue};
use crate::shell::watch::Change;

const RESOURCE: &str = "servicecidrs";

/// The ServiceCIDR controller's flags: none (kube-controller-manager has none
/// either; it runs 5 workers).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ServiceCidrFlags {}

impl FlagGroup for ServiceCidrFlags {
    type Config = Config;

    fn config(&self, _all: &clap::ArgMatches, _shared: &Shared) -> Result<Config, clap::Error> {
        Ok(Config { workers: 5 })
    }
}

/// Settings of the ServiceCIDR controller.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Workers (kube-controller-manager runs 5).
    pub workers: usize,
}

/// The controller.
#[derive(Debug)]
pub(crate) struct ServiceCidrController {
    parts: Parts,
    config: Config,
}

impl ServiceCidrController {
    pub(crate) fn new(parts: Parts, config: Config) -> Self {
        Self { parts, config }
    }

    fn all(&self) -> Vec<Arc<ServiceCIDR>> {
        self.parts.cache.service_cidrs.read().all()
    }

    fn add_all(&self, keys: Vec<String>) {
        for key in keys {
            self.parts.queue.add(key);
        }
    }

    async fn write(&self, name: &str, write: &Write) -> Result<(), SyncError> {
        let body = write.body(name, Timestamp::now());
        match write.sent() {
            Sent::StrategicMerge => {
                self.parts
                    .writer
                    .patch_cluster::<ServiceCIDR>(
                        RESOURCE,
                        name,
                        &PatchParams::default(),
                        &Patch::Strategic(body),
                        false,
                    )
                    .await?;
            }
            Sent::ApplyStatus => {
                let result = self
                    .parts
                    .writer
                    .patch_cluster::<ServiceCIDR>(
                        RESOURCE,
                        name,
                        &PatchParams::apply(CONTROLLER_NAME).force(),
                        &Patch::Apply(body),
                        true,
                    )
                    .await;
                if let Err(e) = &result
                    && matches!(write, Write::SetReady(c) if c.status == "True")
                {
                    debug!(servicecidr = name, error = %e, "status not written");
                    self.record_error(name);
                }
                result?;
            }
        }
        Ok(())
    }

    /// Upstream's Warning when the `Ready=True` status cannot be written.
    fn record_error(&self, name: &str) {
        let uid = self
            .parts
            .cache
            .service_cidrs
            .read()
            .get("", name)
            .and_then(|o| o.metadata.uid.clone());
        self.parts.events.record(EventRecord::from_planned(
            object_reference(
                "networking.k8s.io/v1",
                "ServiceCIDR",
                "",
                name,
                uid.as_deref(),
            ),
            CONTROLLER_NAME,
            "Reconcile",
            &PlannedEvent::warning(REASON_ERROR, MSG_ERROR.to_owned()),
        ));
    }

    async fn sync_key(&self, key: &str) -> Result<(), SyncError> {
        let Some(cidr) = self.parts.cache.service_cidrs.read().get("", key) else {
            return Ok(());
        };
        let all = self.all();
        let ips = self.parts.cache.ip_addresses.read().all();
        let plan = core_cidr::reconcile(&core_cidr::Inputs {
            cidr: &cidr,
            all: &all,
            ip_addresses: &ips,
            now: Timestamp::now(),
        });
        for w in &plan.writes {
            self.write(key, w).await?;
        }
        if let Some(after) = plan.requeue_after {
            self.parts.queue.add_after(key.to_owned(), after);
        }
        Ok(())
    }
}

impl super::Registered for ServiceCidrController {
    type Flags = ServiceCidrFlags;

    fn build(b: &super::Build<'_>, config: Config) -> Self {
        // client-go's default controller limiter, as upstream's queue uses.
        Self::new(b.parts(RateLimit::ENDPOINTS, Self::QUEUE), config)
    }
}

impl Controller for ServiceCidrController {
    fn on_service_cidr(&self, change: &Change<ServiceCIDR>) {
        self.add_all(keys_for_service_cidr(change, &self.all()));
    }

    fn on_ip_address(&self, change: &Change<IPAddress>) {
        self.add_all(keys_for_ip_address(change, &self.all()));
    }

    fn start(self: Arc<Self>, _stop: &CancellationToken) -> Vec<JoinHandle<()>> {
        spawn_workers(
            &self,
            &self.parts.queue,
            &self.parts.metrics,
            self.config.workers,
        )
    }

    fn queue(&self) -> Option<&Arc<WorkQueue<String>>> {
        Some(&self.parts.queue)
    }
}

impl Syncer for ServiceCidrController {
    /// Upstream's queue name.
    const QUEUE: &'static str = "ipaddresses";

    async fn sync(&self, key: &str) -> Result<(), SyncError> {
        self.sync_key(key).await
    }
}
