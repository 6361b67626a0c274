//! The `endpoints.kubernetes.io/last-change-trigger-time` computation
//! (ES-1.6).
//!
//! The value tells latency SLO tooling when the change that caused a write
//! happened. It needs memory across syncs (the last trigger time seen per
//! Pod and for the Service), which this tracker keeps per Service key; the
//! computation itself reads no clock.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;

use crate::core::pod::PodView;

#[derive(Debug, Default, Clone)]
struct ServiceState {
    service_time: Option<Timestamp>,
    pod_times: HashMap<String, Timestamp>,
}

/// Remembers, per Service key, the trigger times seen at the last sync.
#[derive(Debug, Default, Clone)]
pub struct TriggerTimeTracker {
    services: HashMap<String, ServiceState>,
}

/// The `lastTransitionTime` of the Pod's `Ready` condition.
pub fn pod_trigger_time<P: PodView>(pod: &P) -> Option<Timestamp> {
    pod.ready_transition_time()
}

fn key_of(service: &Service) -> String {
    format!(
        "{}/{}",
        service.metadata.namespace.as_deref().unwrap_or_default(),
        service.metadata.name.as_deref().unwrap_or_default()
    )
}

fn earliest(current: Option<Timestamp>, candidate: Timestamp) -> Option<Timestamp> {
    Some(match current {
        Some(c) if c <= candidate => c,
        _ => candidate,
    })
}

impl TriggerTimeTracker {
    /// Computes this sync's trigger time for `service` given the Pods it
    /// selects, and records the current values for the next sync. The first
    /// sync of a key yields the Service's creationTimestamp; later syncs the
    /// earliest trigger time that moved forward, or `None` when none did.
    pub fn compute<P: PodView>(&mut self, service: &Service, pods: &[Arc<P>]) -> Option<Timestamp> {
        let key = key_of(service);
        let previous = self.services.get(&key);
        let was_known = previous.is_some();
        let mut result: Option<Timestamp> = None;
        let mut pod_times = HashMap::with_capacity(pods.len());
        for pod in pods {
            let Some(t) = pod_trigger_time(pod.as_ref()) else {
                continue;
            };
            let name = pod.name().to_owned();
            let moved = previous
                .and_then(|p| p.pod_times.get(&name))
                .is_none_or(|last| t > *last);
            if moved {
                result = earliest(result, t);
            }
            pod_times.insert(name, t);
        }
        let service_time = service.metadata.creation_timestamp.as_ref().map(|t| t.0);
        if let Some(t) = service_time {
            let moved = previous
                .and_then(|p| p.service_time)
                .is_none_or(|last| t > last);
            if moved {
                result = earliest(result, t);
            }
        }
        if !was_known {
            result = service_time;
        }
        self.services.insert(
            key,
            ServiceState {
                service_time,
                pod_times,
            },
        );
        result
    }

    /// Drops the state of a Service observed deleted.
    pub fn forget(&mut self, namespace: &str, name: &str) {
        self.services.remove(&format!("{namespace}/{name}"));
    }
}

/// Formats a trigger time as Go's `time.RFC3339Nano` in UTC: fractional
/// seconds with trailing zeros trimmed, none when zero.
pub fn format_rfc3339_nano(t: Timestamp) -> String {
    let secs = t.as_second();
    let nanos = t.subsec_nanosecond();
    let whole = Timestamp::from_second(secs).unwrap_or(t);
    let base = whole.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    if nanos == 0 {
        format!("{base}Z")
    } else {
        let frac = format!("{nanos:09}");
        format!("{base}.{}Z", frac.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn svc(created: &str) -> Service {
        Service {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("svc".into()),
                creation_timestamp: Some(Time(ts(created))),
                ..ObjectMeta::default()
            },
            ..Service::default()
        }
    }

    fn pod(name: &str, ready_at: Option<&str>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                conditions: ready_at.map(|t| {
                    vec![PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        last_transition_time: Some(Time(ts(t))),
                        ..PodCondition::default()
                    }]
                }),
                ..PodStatus::default()
            }),
            ..Pod::default()
        })
    }

    #[test]
    fn rule_1_6_first_sync_uses_service_creation_timestamp() {
        let mut tracker = TriggerTimeTracker::default();
        let s = svc("2020-01-01T00:00:00Z");
        let pods = [pod("a", Some("2021-01-01T00:00:00Z"))];
        assert_eq!(tracker.compute(&s, &pods), Some(ts("2020-01-01T00:00:00Z")));
    }

    #[test]
    fn rule_1_6_nothing_moved_gives_no_time() {
        let mut tracker = TriggerTimeTracker::default();
        let s = svc("2020-01-01T00:00:00Z");
        let pods = [pod("a", Some("2021-01-01T00:00:00Z"))];
        tracker.compute(&s, &pods);
        assert_eq!(tracker.compute(&s, &pods), None);
    }

    #[test]
    fn rule_1_6_minimum_of_pod_times_that_moved_forward() {
        let mut tracker = TriggerTimeTracker::default();
        let s = svc("2020-01-01T00:00:00Z");
        tracker.compute(
            &s,
            &[
                pod("a", Some("2021-01-01T00:00:00Z")),
                pod("b", Some("2021-01-01T00:00:00Z")),
                pod("c", Some("2021-06-01T00:00:00Z")),
            ],
        );
        let next = [
            pod("a", Some("2021-03-01T00:00:00Z")),
            pod("b", Some("2021-02-01T00:00:00Z")),
            pod("c", Some("2021-06-01T00:00:00Z")),
            pod("d", Some("2021-04-01T00:00:00Z")),
            pod("e", None),
        ];
        assert_eq!(tracker.compute(&s, &next), Some(ts("2021-02-01T00:00:00Z")));
    }

    #[test]
    fn rule_1_6_forget_makes_next_sync_a_first_sync() {
        let mut tracker = TriggerTimeTracker::default();
        let s = svc("2020-01-01T00:00:00Z");
        let no_pods: &[Arc<Pod>] = &[];
        tracker.compute(&s, no_pods);
        tracker.forget("ns", "svc");
        assert_eq!(
            tracker.compute(&s, no_pods),
            Some(ts("2020-01-01T00:00:00Z"))
        );
    }

    #[test]
    fn rule_1_6_rfc3339_nano_trims_trailing_zeros() {
        assert_eq!(
            format_rfc3339_nano(ts("2018-01-01T00:00:00Z")),
            "2018-01-01T00:00:00Z"
        );
        assert_eq!(
            format_rfc3339_nano(ts("2018-01-01T00:00:00.120Z")),
            "2018-01-01T00:00:00.12Z"
        );
        assert_eq!(
            format_rfc3339_nano(ts("2018-01-01T10:00:00.000000001+02:00")),
            "2018-01-01T08:00:00.000000001Z"
        );
    }
}
