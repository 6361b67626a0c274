//! `migrate --apply`: recreating the planned Services through the API server.
//!
//! The run first finishes what an interrupted run left in its journal (a ConfigMap,
//! [`super::recreate`]), then deletes the old ServiceCIDR so that nothing new is handed
//! out of it (it stays, terminating, while Services use it), re-plans from what the
//! cluster holds now, and moves the Services in the plan's order, `--max-in-flight` at
//! a time with `--pause` between batches. Moving one is: journal entry, delete (the old
//! uid as precondition), create with the new ClusterIPs, wait until its EndpointSlices
//! exist (when it selects Pods), an Event on the new object, journal entry removed. The
//! first failure stops the run after the batch in flight, saying how to resume: the
//! same command again. Every step can be repeated, so running it again is always safe.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client};
use serde::Serialize;

use svcplane_webhook::service_event::{Happened, Reporter};

use super::plan::{self, Move};
use super::recreate::{self, JournalEntry, Resume};
use super::{MigrateError, SEED};

/// How `--apply` paces itself.
#[derive(Debug, Clone)]
pub struct ApplyOptions {
    /// Services moved at once.
    pub max_in_flight: usize,
    /// Wait between batches.
    pub pause: Duration,
    /// How long to wait for a moved Service's EndpointSlices.
    pub slice_timeout: Duration,
    /// Where the journal ConfigMap lives.
    pub journal_namespace: String,
}

/// What one moved Service cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Moved {
    pub service: String,
    pub cluster_ips: Vec<String>,
    pub new_cluster_ips: Vec<String>,
    /// From the delete being accepted to the create being accepted: the Service
    /// exists nowhere in between.
    pub gap_ms: u64,
    /// From the delete to its EndpointSlices existing again (`None`: it selects no
    /// Pods, or they did not appear within `--slice-timeout`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slices_ms: Option<u64>,
    /// It selects Pods, and its EndpointSlices did not appear within `--slice-timeout`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub slices_missing: bool,
    /// Finished from an interrupted run's journal.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub resumed: bool,
}

/// What `--apply` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyReport {
    pub from: String,
    pub to: String,
    pub moved: Vec<Moved>,
    /// Services left to the operator, with why and how (as the plan says).
    pub manual: Vec<plan::Manual>,
    /// Moved Services whose EndpointSlices did not appear in time.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slow_slices: Vec<String>,
    /// What became of the old ServiceCIDR.
    pub old_range: String,
}

/// Why `--apply` cannot start.
fn refuse(message: String) -> MigrateError {
    MigrateError::Apply(message)
}

/// Runs `--apply` against the cluster behind `client`; progress lines go to `progress`.
pub async fn apply(
    client: Client,
    from_name: &str,
    to_name: &str,
    options: &ApplyOptions,
    progress: &mut dyn FnMut(String),
) -> Result<ApplyReport, MigrateError> {
    let cidrs: Api<ServiceCIDR> = Api::all(client.clone());
    if from_name == svcplane_allocator::service_cidrs::DEFAULT_SERVICE_CIDR_NAME {
        return Err(refuse(format!(
            "--apply cannot leave the {from_name:?} ServiceCIDR: kube-apiserver owns it (its --service-cluster-ip-range); add a ServiceCIDR, change the flag, then move the Services with the plan's steps"
        )));
    }
    if cidrs
        .get_opt(to_name)
        .await
        .map_err(failed("reading the ServiceCIDR"))?
        .is_none()
    {
        return Err(refuse(format!(
            "--to {to_name:?}: no such ServiceCIDR (--apply moves between ServiceCIDR objects)"
        )));
    }
    let journal = Journal::open(&client, &options.journal_namespace, from_name, to_name).await?;
    let mut report = ApplyReport {
        from: from_name.to_owned(),
        to: to_name.to_owned(),
        moved: Vec::new(),
        manual: Vec::new(),
        slow_slices: Vec::new(),
        old_range: String::new(),
    };
    // 1. What an interrupted run left half done. An entry whose old object is still
    // there is dropped: the plan below moves that Service afresh, with addresses that
    // are free now.
    for (key, entry) in journal.entries().await? {
        let ns = entry.service.metadata.namespace.clone().unwrap_or_default();
        let name = entry.service.metadata.name.clone().unwrap_or_default();
        let current = Api::<Service>::namespaced(client.clone(), &ns)
            .get_opt(&name)
            .await
            .map_err(failed("reading the Service"))?;
        if recreate::resume(
            &entry,
            current.as_ref().and_then(|s| s.metadata.uid.as_deref()),
        ) == Resume::Redo
        {
            journal.remove(&key).await?;
            continue;
        }
        let m = finish(&client, &journal, &key, entry, options, true).await?;
        record_event(&client, &m, from_name, to_name).await;
        progress(format!(
            "resumed {} ({} ms without a Service)",
            m.service, m.gap_ms
        ));
        report.moved.push(m);
    }
    // 2. Nothing new from the old range.
    let Some(old) = cidrs
        .get_opt(from_name)
        .await
        .map_err(failed("reading the ServiceCIDR"))?
    else {
        report.old_range = format!("ServiceCIDR {from_name} is gone: nothing left to move");
        journal.remove_if_empty().await?;
        return Ok(report);
    };
    if old.metadata.deletion_timestamp.is_none() {
        cidrs
            .delete(from_name, &DeleteParams::default())
            .await
            .map_err(failed("deleting the old ServiceCIDR"))?;
        progress(format!(
            "deleted ServiceCIDR {from_name}: it hands out nothing more and goes once no Service uses it"
        ));
    }
    // 3. The plan, from what the cluster holds now.
    let world = super::live_world(client.clone()).await?;
    let where_ = world.source.where_();
    let from = plan::side("from", from_name, &world.snapshot, &where_)?;
    let to = plan::side("to", to_name, &world.snapshot, &where_)?;
    let p = plan::plan(&world.snapshot, from, to, SEED)?;
    report.manual = p.manual.clone();
    let total = p.moves.len();
    let mut done = 0;
    for batch in p.moves.chunks(options.max_in_flight.max(1)) {
        let results = futures::future::join_all(
            batch
                .iter()
                .map(|m| move_one(&client, &journal, m, from_name, to_name, options)),
        )
        .await;
        let mut failure = None;
        for r in results {
            match r {
                Ok(m) => {
                    done += 1;
                    progress(format!(
                        "[{done}/{total}] {} {} -> {} ({} ms without a Service{})",
                        m.service,
                        m.cluster_ips.join(","),
                        m.new_cluster_ips.join(","),
                        m.gap_ms,
                        m.slices_ms
                            .map(|s| format!(", EndpointSlices after {s} ms"))
                            .unwrap_or_default()
                    ));
                    if m.slices_missing {
                        report.slow_slices.push(m.service.clone());
                    }
                    report.moved.push(m);
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failure {
            return Err(MigrateError::Apply(format!(
                "{e}; {done} of {total} Services moved. Fix the cause and run the same command again: it finishes what is half done (journal ConfigMap {}/{}) and moves the rest",
                options.journal_namespace, journal.name
            )));
        }
        if !options.pause.is_zero() {
            tokio::time::sleep(options.pause).await;
        }
    }
    report.old_range = match cidrs
        .get_opt(from_name)
        .await
        .map_err(failed("reading the ServiceCIDR"))?
    {
        None => format!("ServiceCIDR {from_name} is gone"),
        Some(_) => format!(
            "ServiceCIDR {from_name} is terminating: it goes once the Services left to you no longer use it"
        ),
    };
    journal.remove_if_empty().await?;
    Ok(report)
}

/// Does `svc` select Pods, so that an EndpointSlice controller writes its slices?
fn wants_slices(svc: &Service) -> bool {
    svc.spec.as_ref().is_some_and(|s| {
        s.type_.as_deref() != Some("ExternalName")
            && s.selector.as_ref().is_some_and(|m| !m.is_empty())
    })
}

fn failed(what: &'static str) -> impl Fn(kube::Error) -> MigrateError {
    move |e| MigrateError::Apply(format!("{what}: {e}"))
}

/// Moves one Service of the plan.
async fn move_one(
    client: &Client,
    journal: &Journal,
    m: &Move,
    from: &str,
    to: &str,
    options: &ApplyOptions,
) -> Result<Moved, MigrateError> {
    let (ns, name) = m.service.split_once('/').unwrap_or(("", &m.service));
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let Some(old) = services
        .get_opt(name)
        .await
        .map_err(failed("reading the Service"))?
    else {
        return Err(MigrateError::Apply(format!(
            "{}: gone since the plan",
            m.service
        )));
    };
    let entry = JournalEntry {
        old_uid: old.metadata.uid.clone().unwrap_or_default(),
        service: recreate::recreated(&old, &m.new_cluster_ips),
    };
    let key = recreate::journal_key(ns, name);
    journal.put(&key, &entry).await?;
    let moved = finish(client, journal, &key, entry, options, false).await?;
    record_event(client, &moved, from, to).await;
    Ok(moved)
}

/// Finishes a journalled move: delete (if the old object is still there), create (if
/// nothing is there), wait for the slices, drop the entry. `resumed`: the entry is an
/// interrupted run's.
async fn finish(
    client: &Client,
    journal: &Journal,
    key: &str,
    entry: JournalEntry,
    options: &ApplyOptions,
    resumed: bool,
) -> Result<Moved, MigrateError> {
    let ns = entry.service.metadata.namespace.clone().unwrap_or_default();
    let name = entry.service.metadata.name.clone().unwrap_or_default();
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let current = services
        .get_opt(&name)
        .await
        .map_err(failed("reading the Service"))?;
    let step = recreate::resume(
        &entry,
        current.as_ref().and_then(|s| s.metadata.uid.as_deref()),
    );
    let start = Instant::now();
    let mut created: Option<Service> = current.filter(|_| step == Resume::Done);
    if step == Resume::Redo {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(entry.old_uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match services.delete(&name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(failed("deleting the Service")(e)),
        }
    }
    if created.is_none() {
        created = Some(create(&services, &entry.service).await?);
    }
    let gap_ms = if step == Resume::Done {
        0
    } else {
        millis(start.elapsed())
    };
    let new = created.unwrap_or_default();
    let slices_ms = if wants_slices(&new) {
        wait_for_slices(client, &new, options.slice_timeout)
            .await
            .map(|()| millis(start.elapsed()))
    } else {
        None
    };
    let slices_missing = wants_slices(&new) && slices_ms.is_none();
    journal.remove(key).await?;
    // The old addresses, as the journalled object records them.
    let cluster_ips = entry
        .service
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(recreate::MIGRATED_FROM))
        .map(|ips| ips.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    Ok(Moved {
        service: format!("{ns}/{name}"),
        cluster_ips,
        new_cluster_ips: new
            .spec
            .as_ref()
            .and_then(|s| s.cluster_ips.clone())
            .unwrap_or_default(),
        gap_ms,
        slices_ms,
        slices_missing,
        resumed,
    })
}

/// Creates `svc`; when an address it names was taken since the plan (another client
/// was quicker), creates it with automatic addresses instead: the old object is gone
/// by now, and a Service with another address beats no Service (the report shows the
/// addresses it got; the old range hands out nothing any more).
async fn create(services: &Api<Service>, svc: &Service) -> Result<Service, MigrateError> {
    let name = svc.metadata.name.clone().unwrap_or_default();
    let failed = |e: kube::Error| MigrateError::Apply(format!("creating {name}: {e}"));
    match services.create(&PostParams::default(), svc).await {
        Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains("already allocated") => {
            tracing::warn!(service = %name, refusal = %s.message, "a planned address was taken; creating with automatic ones");
            let mut automatic = svc.clone();
            if let Some(spec) = automatic.spec.as_mut() {
                spec.cluster_ip = None;
                spec.cluster_ips = None;
            }
            services
                .create(&PostParams::default(), &automatic)
                .await
                .map_err(failed)
        }
        other => other.map_err(failed),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Waits until an EndpointSlice of `svc` (owned by this object) exists; `None` on
/// timeout.
async fn wait_for_slices(client: &Client, svc: &Service, timeout: Duration) -> Option<()> {
    let ns = svc.metadata.namespace.clone().unwrap_or_default();
    let name = svc.metadata.name.clone().unwrap_or_default();
    let uid = svc.metadata.uid.clone().unwrap_or_default();
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    let params = ListParams::default().labels(&format!("kubernetes.io/service-name={name}"));
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(list) = slices.list(&params).await
            && list.items.iter().any(|s| {
                s.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.uid == uid)
            })
        {
            return Some(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// A Normal `Migrated` Event on the new object (best effort).
async fn record_event(client: &Client, m: &Moved, from: &str, to: &str) {
    let (ns, name) = m.service.split_once('/').unwrap_or(("", &m.service));
    let note = format!(
        "recreated with ClusterIPs {} (were {}): svcplane migrate --from {from} --to {to}",
        m.new_cluster_ips.join(","),
        m.cluster_ips.join(",")
    );
    let event = svcplane_webhook::service_event::normal_service_event(
        ns,
        name,
        Happened {
            reason: "Migrated",
            action: "Recreate",
            note: &note,
        },
        Reporter {
            controller: "svcplane.io/migrate",
            instance: "svcplane-migrate",
        },
        k8s_openapi::jiff::Timestamp::now(),
    );
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    if let Err(e) = events.create(&PostParams::default(), &event).await {
        tracing::debug!(error = %e, "could not record the Migrated event");
    }
}

/// The journal ConfigMap: one data key per Service between its delete and its create.
struct Journal {
    api: Api<ConfigMap>,
    name: String,
}

impl Journal {
    async fn open(
        client: &Client,
        namespace: &str,
        from: &str,
        to: &str,
    ) -> Result<Self, MigrateError> {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        let name = recreate::journal_name(from, to);
        if api
            .get_opt(&name)
            .await
            .map_err(failed("reading the journal"))?
            .is_none()
        {
            let mut cm = ConfigMap::default();
            cm.metadata.name = Some(name.clone());
            cm.metadata.labels =
                Some([(recreate::JOURNAL_LABEL.to_owned(), "true".to_owned())].into());
            // `explain range` reads the move's two ends from these.
            cm.metadata.annotations = Some(
                [
                    (recreate::JOURNAL_FROM.to_owned(), from.to_owned()),
                    (recreate::JOURNAL_TO.to_owned(), to.to_owned()),
                ]
                .into(),
            );
            match api.create(&PostParams::default(), &cm).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(failed("creating the journal")(e)),
            }
        }
        Ok(Self { api, name })
    }

    async fn entries(&self) -> Result<Vec<(String, JournalEntry)>, MigrateError> {
        let cm = self
            .api
            .get(&self.name)
            .await
            .map_err(failed("reading the journal"))?;
        let mut out = Vec::new();
        for (key, text) in cm.data.unwrap_or_default() {
            let entry: JournalEntry = serde_json::from_str(&text).map_err(|e| {
                MigrateError::Apply(format!(
                    "journal ConfigMap {}: entry {key:?} does not parse ({e}); fix or remove it by hand",
                    self.name
                ))
            })?;
            out.push((key, entry));
        }
        Ok(out)
    }

    async fn put(&self, key: &str, entry: &JournalEntry) -> Result<(), MigrateError> {
        let text = serde_json::to_string(entry).map_err(|e| MigrateError::Encode(e.to_string()))?;
        self.set(key, serde_json::Value::String(text)).await
    }

    async fn remove(&self, key: &str) -> Result<(), MigrateError> {
        self.set(key, serde_json::Value::Null).await
    }

    /// Sets (null: removes) one entry with a merge patch of that key alone, so the
    /// entries of other Services in flight are left alone.
    async fn set(&self, key: &str, value: serde_json::Value) -> Result<(), MigrateError> {
        let body = serde_json::json!({"data": {key: value}});
        self.api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map(|_| ())
            .map_err(failed("writing the journal"))
    }

    async fn remove_if_empty(&self) -> Result<(), MigrateError> {
        let cm = self
            .api
            .get(&self.name)
            .await
            .map_err(failed("reading the journal"))?;
        if cm.data.unwrap_or_default().is_empty() {
            let _ = self.api.delete(&self.name, &DeleteParams::default()).await;
        }
        Ok(())
    }
}
