//! A Normal `events.k8s.io/v1` Event about a Service, as svcplane's own tools record
//! them outside a controller's event recorder (the webhook giving retained values back,
//! `svcplane migrate` recreating a Service): one builder, so each names its object and
//! itself the same way.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

/// Who records an Event: `reportingController` and `reportingInstance`.
#[derive(Debug, Clone, Copy)]
pub struct Reporter<'a> {
    pub controller: &'a str,
    pub instance: &'a str,
}

/// What happened to a Service: `reason`, `action` and the `note` people read.
#[derive(Debug, Clone, Copy)]
pub struct Happened<'a> {
    pub reason: &'a str,
    pub action: &'a str,
    pub note: &'a str,
}

/// A Normal Event about Service `namespace/name` at `now`.
pub fn normal_service_event(
    namespace: &str,
    name: &str,
    what: Happened<'_>,
    by: Reporter<'_>,
    now: jiff::Timestamp,
) -> Event {
    Event {
        metadata: ObjectMeta {
            // As client-go names events: the object's name and a unique suffix (a
            // generateName ending in '.' is refused).
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        regarding: Some(ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Service".to_owned()),
            namespace: Some(namespace.to_owned()),
            name: Some(name.to_owned()),
            ..ObjectReference::default()
        }),
        event_time: Some(MicroTime(now)),
        type_: Some("Normal".to_owned()),
        reason: Some(what.reason.to_owned()),
        action: Some(what.action.to_owned()),
        note: Some(what.note.to_owned()),
        reporting_controller: Some(by.controller.to_owned()),
        reporting_instance: Some(by.instance.to_owned()),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_event_names_its_object_and_reporter_with_a_unique_name() {
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let e = normal_service_event(
            "shop",
            "web",
            Happened {
                reason: "Migrated",
                action: "Recreate",
                note: "moved",
            },
            Reporter {
                controller: "svcplane.io/migrate",
                instance: "svcplane-migrate",
            },
            now,
        );
        assert_eq!(
            e.metadata.name.as_deref(),
            Some(format!("web.{:x}", now.as_nanosecond()).as_str())
        );
        let r = e.regarding.unwrap();
        assert_eq!(
            (r.kind.as_deref(), r.namespace.as_deref(), r.name.as_deref()),
            (Some("Service"), Some("shop"), Some("web"))
        );
        assert_eq!(
            (e.type_.as_deref(), e.reason.as_deref(), e.action.as_deref()),
            (Some("Normal"), Some("Migrated"), Some("Recreate"))
        );
        assert_eq!(
            e.reporting_controller.as_deref(),
            Some("svcplane.io/migrate")
        );
    }
}
