use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::networking::v1::{
    IPAddress, IPAddressSpec, ParentReference, ServiceCIDR, ServiceCIDRSpec, ServiceCIDRStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::triggers::{keys_for_ip_address, keys_for_service_cidr};
use super::*;
use crate::core::change::Change;

fn now() -> Timestamp {
    crate::core::fixtures::epoch() + SignedDuration::from_secs(100)
}

fn cidr(name: &str, cidrs: &[&str]) -> ServiceCIDR {
    let mut o = ServiceCIDR::default();
    o.metadata.name = Some(name.into());
    o.spec = Some(ServiceCIDRSpec {
        cidrs: Some(cidrs.iter().map(|s| s.to_string()).collect()),
    });
    o
}

fn ready(mut o: ServiceCIDR) -> ServiceCIDR {
    o.metadata.finalizers = Some(vec![FINALIZER.into()]);
    o.status = Some(ServiceCIDRStatus {
        conditions: Some(vec![Condition {
            type_: CONDITION_READY.into(),
            status: "True".into(),
            reason: String::new(),
            message: MSG_READY.into(),
            last_transition_time: Time(now()),
            observed_generation: None,
        }]),
    });
    o
}

fn deleting(mut o: ServiceCIDR, seconds_ago: i64) -> ServiceCIDR {
    o.metadata.deletion_timestamp = Some(Time(now() - SignedDuration::from_secs(seconds_ago)));
    o
}

fn ip(address: &str) -> IPAddress {
    let mut o = IPAddress::default();
    o.metadata.name = Some(address.into());
    let family = if address.contains(':') {
        "IPv6"
    } else {
        "IPv4"
    };
    o.metadata.labels = Some(BTreeMap::from([
        (LABEL_MANAGED_BY.to_owned(), ALLOCATOR_MANAGER.to_owned()),
        (LABEL_FAMILY.to_owned(), family.to_owned()),
    ]));
    o.spec = IPAddressSpec {
        parent_ref: ParentReference {
            group: Some(String::new()),
            resource: "services".into(),
            namespace: Some("default".into()),
            name: "web".into(),
        },
    };
    o
}

fn plan(target: &ServiceCIDR, all: &[ServiceCIDR], ips: &[IPAddress]) -> Plan {
    let all: Vec<Arc<ServiceCIDR>> = all.iter().cloned().map(Arc::new).collect();
    let ips: Vec<Arc<IPAddress>> = ips.iter().cloned().map(Arc::new).collect();
    reconcile(&Inputs {
        cidr: target,
        all: &all,
        ip_addresses: &ips,
        now: now(),
    })
}

fn ready_true() -> Write {
    Write::SetReady(ReadyCondition {
        status: "True",
        reason: "",
        message: MSG_READY,
    })
}

#[test]
fn rule_6_a_new_service_cidr_gets_the_finalizer_then_ready_true() {
    let c = cidr("extra", &["10.97.0.0/16"]);
    assert_eq!(
        plan(&c, std::slice::from_ref(&c), &[]).writes,
        [Write::AddFinalizer, ready_true()]
    );
}

#[test]
fn rule_6_a_ready_service_cidr_needs_no_write() {
    let c = ready(cidr("extra", &["10.97.0.0/16"]));
    assert_eq!(plan(&c, std::slice::from_ref(&c), &[]), Plan::default());
}

#[test]
fn rule_6_deleting_with_an_address_only_it_covers_turns_not_ready_and_keeps_the_finalizer() {
    let c = deleting(ready(cidr("extra", &["10.97.0.0/16"])), 60);
    let p = plan(&c, std::slice::from_ref(&c), &[ip("10.97.0.10")]);
    assert_eq!(
        p.writes,
        [Write::SetReady(ReadyCondition {
            status: "False",
            reason: REASON_TERMINATING,
            message: MSG_TERMINATING,
        })]
    );
    assert_eq!(p.requeue_after, None);
}

#[test]
fn rule_6_an_address_another_cidr_also_covers_does_not_block() {
    let c = deleting(ready(cidr("extra", &["10.97.0.0/24"])), 60);
    let other = ready(cidr("wide", &["10.97.0.0/23"]));
    let p = plan(&c, &[c.clone(), other], &[ip("10.97.0.10")]);
    assert_eq!(p.writes, [Write::RemoveFinalizer]);
}

#[test]
fn rule_6_the_network_address_is_covered_by_no_cidr() {
    // 10.97.0.0 is the network address of the /24: no ServiceCIDR covers it, so it
    // blocks nothing.
    let c = deleting(ready(cidr("extra", &["10.97.0.0/24"])), 60);
    let p = plan(&c, std::slice::from_ref(&c), &[ip("10.97.0.0")]);
    assert_eq!(p.writes, [Write::RemoveFinalizer]);
}

#[test]
fn rule_6_addresses_not_of_the_allocator_are_ignored() {
    let c = deleting(ready(cidr("extra", &["10.97.0.0/16"])), 60);
    let mut foreign = ip("10.97.0.10");
    foreign.metadata.labels = None;
    let p = plan(&c, std::slice::from_ref(&c), &[foreign]);
    assert_eq!(p.writes, [Write::RemoveFinalizer]);
}

#[test]
fn rule_6_the_finalizer_waits_out_the_ten_second_grace() {
    let c = deleting(ready(cidr("extra", &["10.97.0.0/16"])), 4);
    let p = plan(&c, std::slice::from_ref(&c), &[]);
    assert!(p.writes.is_empty());
    assert_eq!(p.requeue_after, Some(Duration::from_secs(6)));
}

#[test]
fn rule_6_a_cidr_inside_another_goes_whatever_its_addresses() {
    let c = deleting(ready(cidr("small", &["10.96.1.0/24"])), 60);
    let parent = ready(cidr("kubernetes", &["10.96.0.0/16"]));
    let p = plan(&c, &[parent, c.clone()], &[ip("10.96.1.5")]);
    assert_eq!(p.writes, [Write::RemoveFinalizer]);
}

#[test]
fn rule_6_triggers_queue_overlapping_cidrs_on_add_and_covering_cidrs_on_ip_changes() {
    let a = Arc::new(cidr("a", &["10.97.0.0/16"]));
    let b = Arc::new(cidr("b", &["10.97.1.0/24"]));
    let c = Arc::new(cidr("c", &["10.98.0.0/16"]));
    let all = [a.clone(), b.clone(), c.clone()];
    assert_eq!(
        keys_for_service_cidr(&Change::Added(b.clone()), &all),
        ["a", "b"]
    );
    assert_eq!(
        keys_for_service_cidr(
            &Change::Updated {
                old: b.clone(),
                new: b.clone()
            },
            &all
        ),
        ["b"]
    );
    assert_eq!(
        keys_for_ip_address(&Change::Added(Arc::new(ip("10.97.1.7"))), &all),
        ["a", "b"]
    );
    let mut foreign = ip("10.97.1.7");
    foreign.metadata.labels = None;
    assert!(keys_for_ip_address(&Change::Deleted(Arc::new(foreign)), &all).is_empty());
}
