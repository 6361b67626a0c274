//! `svcplane check`: is the installed webhook answering?
//!
//! The chart runs it as a post-install/post-upgrade hook and as `helm test`; operators
//! run it by hand after changing anything. It creates a probe Service as a
//! server-side dry run (nothing is stored, nothing is claimed) in the release namespace,
//! labelled [`PROBE_LABEL`]; the chart's webhook configurations review such probes
//! there (and nothing else in that namespace). svcplane's mutating webhook marks its
//! answer to a dry-run probe with [`PROBE_ANSWERED_BY`]. So:
//!
//! - the annotation is there: svcplane answered → exit 0, naming the replica;
//! - the dry run succeeded without it: the API server admitted the Service without
//!   svcplane (`failurePolicy: Ignore` hid a webhook that is down or unreachable);
//! - the dry run failed: with `failurePolicy: Fail` the API server says why it could
//!   not call the webhook.
//!
//! Both of the last two are retried every `--interval` until `--timeout`, then exit 1
//! with the last reason and where to look.
//!
//! Two more reads make a broken release fail fast and an incomplete one fail at all
//! (`workload.rs`): with `--pods-selector`, svcplane's Pods are listed until the check
//! passes, and when every one of them (not being deleted) cannot run (an image that cannot be pulled, a
//! crash loop) the check exits 1 with the kubelet's reasons instead of waiting out its
//! timeout; with `--leader-lease`, success also needs a replica seen renewing that
//! Lease, so an install whose controllers have no leader is not reported as done.

mod workload;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service, ServicePort, ServiceSpec};
use kube::Api;
use kube::api::{ListParams, ObjectMeta, PostParams};
use svcplane_webhook::review::{PROBE_ANSWERED_BY, PROBE_LABEL};
use tracing::debug;

use crate::cli::CheckArgs;
use crate::kube_client;

/// What one probe showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// svcplane answered.
    Answered {
        /// The replica that answered.
        by: String,
        /// The ClusterIP it assigned (dry run: not held).
        cluster_ip: Option<String>,
    },
    /// It did not; why.
    NotAnswered(String),
}

/// Judge one dry-run result (pure).
pub fn judge_probe(result: Result<&Service, String>) -> Probe {
    match result {
        Err(e) => Probe::NotAnswered(format!("the dry-run create failed: {e}")),
        Ok(svc) => match svc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PROBE_ANSWERED_BY))
        {
            Some(by) => Probe::Answered {
                by: by.clone(),
                cluster_ip: svc.spec.as_ref().and_then(|s| s.cluster_ip.clone()),
            },
            None => Probe::NotAnswered(
                "the API server admitted the probe without svcplane's answer \
                 (the webhook is not reachable, and failurePolicy Ignore let the write through)"
                    .to_owned(),
            ),
        },
    }
}

/// The probe Service: dry run only, so its name is generated and it never exists.
pub fn probe_service() -> Service {
    Service {
        metadata: ObjectMeta {
            generate_name: Some("svcplane-check-".into()),
            labels: Some(BTreeMap::from([(PROBE_LABEL.to_owned(), String::new())])),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            ports: Some(vec![ServicePort {
                port: 443,
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// How `svcplane check` ended.
#[derive(Debug)]
pub enum Outcome {
    /// svcplane answered.
    Answered {
        namespace: String,
        by: String,
        cluster_ip: Option<String>,
        /// The replica seen renewing `--leader-lease` (`None`: not asked for).
        leader: Option<String>,
        elapsed: Duration,
    },
    /// No answer, and none of svcplane's Pods can run: the kubelet's reasons.
    CannotRun {
        namespace: String,
        causes: Vec<String>,
        elapsed: Duration,
    },
    /// No answer before the timeout.
    TimedOut {
        namespace: String,
        timeout: Duration,
        last: String,
    },
    /// Could not even start (no kubeconfig, no runtime).
    Failed(String),
}

impl Outcome {
    /// 0 answered, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Answered { .. } => 0,
            _ => 1,
        }
    }

    /// `(to stdout, text)`.
    pub fn message(&self) -> (bool, String) {
        match self {
            Self::Answered {
                namespace,
                by,
                cluster_ip,
                leader,
                elapsed,
            } => (
                true,
                format!(
                    "ok: the svcplane webhook answered a dry-run Service create in namespace {namespace} \
                     (replica {by}, clusterIP {}){} after {:.1}s",
                    cluster_ip.as_deref().unwrap_or("none"),
                    leader
                        .as_deref()
                        .map(|l| format!(" and replica {l} leads the controllers"))
                        .unwrap_or_default(),
                    elapsed.as_secs_f64()
                ),
            ),
            Self::CannotRun {
                namespace,
                causes,
                elapsed,
            } => (
                false,
                format!(
                    "svcplane check: no svcplane Pod can run (after {:.1}s):\n  {}\n\
                     Service writes are not blocked by this (with failurePolicy Ignore the API server \
                     allocates alone meanwhile), but svcplane is not in force. Fix the image or values, or look at:\n  \
                     kubectl -n {namespace} describe pods -l app.kubernetes.io/name=svcplane",
                    elapsed.as_secs_f64(),
                    causes.join("\n  ")
                ),
            ),
            Self::TimedOut {
                namespace,
                timeout,
                last,
            } => (
                false,
                format!(
                    "svcplane check: the svcplane webhook did not answer within {}: {last}\n\
                     Service writes are not blocked by this (with failurePolicy Ignore the API server \
                     allocates alone meanwhile), but svcplane is not in force. Look at:\n  \
                     kubectl -n {namespace} get pods,endpointslices -l app.kubernetes.io/name=svcplane\n  \
                     kubectl -n {namespace} logs -l app.kubernetes.io/name=svcplane --tail=50\n  \
                     kubectl get mutatingwebhookconfiguration,validatingwebhookconfiguration -l app.kubernetes.io/name=svcplane\n\
                     and docs/operate/troubleshooting.md in the repository.",
                    crate::duration::format_go_duration(*timeout)
                ),
            ),
            Self::Failed(e) => (false, format!("svcplane check: {e}")),
        }
    }
}

/// Run the check (its own runtime; called from `main`).
pub fn run(args: &CheckArgs) -> Outcome {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return Outcome::Failed(format!("starting the async runtime: {e}")),
    };
    runtime.block_on(check(args))
}

async fn check(args: &CheckArgs) -> Outcome {
    let namespace = crate::process::namespace_or_pod(args.namespace.as_deref());
    let client = match kube_client::connect(args.kubeconfig.as_deref(), "check").await {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(format!("{e:#}")),
    };
    let api: Api<Service> = Api::namespaced(client.clone(), &namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let leases: Api<Lease> = Api::namespaced(client, &namespace);
    let params = PostParams {
        dry_run: true,
        field_manager: Some("svcplane-check".into()),
    };
    let started = Instant::now();
    let first_lease = match &args.leader_lease {
        Some(name) => leases.get_opt(name).await.ok().flatten(),
        None => None,
    };
    let mut judge = workload::Judge::new(args.stuck_patience);
    let mut answer: Option<(String, Option<String>)> = None;
    let mut leader: Option<String> = None;
    let mut last = String::new();
    loop {
        if answer.is_none() {
            let result = api
                .create(&params, &probe_service())
                .await
                .map_err(|e| e.to_string());
            match judge_probe(result.as_ref().map_err(Clone::clone)) {
                Probe::Answered { by, cluster_ip } => answer = Some((by, cluster_ip)),
                Probe::NotAnswered(why) => {
                    debug!(reason = %why, "no answer from the webhook yet");
                    last = why;
                }
            }
        }
        if let (Some(name), None) = (&args.leader_lease, &leader) {
            let latest = leases.get_opt(name).await.ok().flatten();
            leader = workload::leader_renewing(first_lease.as_ref(), latest.as_ref());
            if leader.is_none() && answer.is_some() {
                last = format!(
                    "the webhook answers, but no replica was seen renewing the Lease {namespace}/{name} \
                     (the controllers have no leader yet)"
                );
            }
        }
        if let Some((by, cluster_ip)) = &answer
            && (args.leader_lease.is_none() || leader.is_some())
        {
            return Outcome::Answered {
                namespace,
                by: by.clone(),
                cluster_ip: cluster_ip.clone(),
                leader,
                elapsed: started.elapsed(),
            };
        }
        // Also once answered but without a leader: the answer may have come from a
        // replica of the release being replaced, still draining.
        if let Some(selector) = &args.pods_selector {
            match pods.list(&ListParams::default().labels(selector)).await {
                Ok(list) => {
                    let causes = judge.give_up(&list.items, Instant::now());
                    if !causes.is_empty() {
                        return Outcome::CannotRun {
                            namespace,
                            causes: causes.iter().map(ToString::to_string).collect(),
                            elapsed: started.elapsed(),
                        };
                    }
                }
                Err(e) => debug!(error = %e, "listing svcplane's Pods failed"),
            }
        }
        if started.elapsed() + args.interval > args.timeout {
            return Outcome::TimedOut {
                namespace,
                timeout: args.timeout,
                last,
            };
        }
        tokio::time::sleep(args.interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_annotation(value: Option<&str>) -> Service {
        let mut svc = probe_service();
        svc.metadata.annotations =
            value.map(|v| BTreeMap::from([(PROBE_ANSWERED_BY.to_owned(), v.to_owned())]));
        svc.spec.as_mut().unwrap().cluster_ip = Some("10.96.7.9".into());
        svc
    }

    #[test]
    fn the_probe_is_a_labelled_generate_name_cluster_ip_service() {
        let svc = probe_service();
        assert_eq!(
            svc.metadata.generate_name.as_deref(),
            Some("svcplane-check-")
        );
        assert!(svc.metadata.labels.unwrap().contains_key(PROBE_LABEL));
        assert_eq!(svc.spec.unwrap().type_.as_deref(), Some("ClusterIP"));
    }

    #[test]
    fn only_svcplanes_mark_counts_as_an_answer() {
        assert_eq!(
            judge_probe(Ok(&with_annotation(Some("svcplane-0")))),
            Probe::Answered {
                by: "svcplane-0".into(),
                cluster_ip: Some("10.96.7.9".into())
            }
        );
        let Probe::NotAnswered(why) = judge_probe(Ok(&with_annotation(None))) else {
            panic!("admitted without the mark must not count");
        };
        assert!(why.contains("failurePolicy Ignore"), "{why}");
        let Probe::NotAnswered(why) = judge_probe(Err("failed calling webhook".into())) else {
            panic!("an error is no answer");
        };
        assert!(why.contains("failed calling webhook"), "{why}");
    }

    #[test]
    fn the_messages_say_what_happened_and_where_to_look() {
        let ok = Outcome::Answered {
            namespace: "kube-system".into(),
            by: "svcplane-0".into(),
            cluster_ip: Some("10.96.0.5".into()),
            leader: None,
            elapsed: Duration::from_millis(1500),
        };
        assert_eq!(ok.exit_code(), 0);
        let (stdout, text) = ok.message();
        assert!(
            stdout && text.starts_with("ok:") && text.contains("svcplane-0"),
            "{text}"
        );
        let timed_out = Outcome::TimedOut {
            namespace: "ns".into(),
            timeout: Duration::from_secs(90),
            last: "no endpoints".into(),
        };
        assert_eq!(timed_out.exit_code(), 1);
        let (stdout, text) = timed_out.message();
        assert!(!stdout);
        assert!(text.contains("within 1m30s: no endpoints"), "{text}");
        assert!(text.contains("kubectl -n ns get pods"), "{text}");
    }
}
