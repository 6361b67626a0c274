//! Properties of mutation against arbitrary holder layouts in small ranges.

use proptest::prelude::*;
use serde_json::{Value, json};
use svcplane_allocator::Claim;

use super::*;
use crate::review::mutate;

/// A /28 (14 usable addresses) and 16 NodePorts keep collisions frequent.
fn tiny() -> AllocationState {
    state("10.0.0.0/28", "30000-30015")
}

#[derive(Debug, Clone)]
struct Holder {
    kind: u8,
    own: bool,
    ips: Vec<u8>,
    ports: Vec<u8>,
}

fn holder() -> impl Strategy<Value = Holder> {
    (
        0u8..3,
        prop::bool::weighted(0.2),
        prop::collection::vec(1u8..=14, 0..4),
        prop::collection::vec(0u8..16, 0..4),
    )
        .prop_map(|(kind, own, ips, ports)| Holder {
            kind,
            own,
            ips,
            ports,
        })
}

fn spec() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec!["ClusterIP", "NodePort", "LoadBalancer"]),
        prop::option::of(1u8..=16),
        prop::collection::vec(prop::option::of(0u8..18), 1..4),
        prop::bool::ANY,
    )
        .prop_map(|(ty, user_ip, node_ports, local)| {
            let ports: Vec<Value> = node_ports
                .iter()
                .enumerate()
                .map(|(i, np)| {
                    let mut p = json!({"name": format!("p{i}"), "port": 80 + i, "protocol": "TCP"});
                    if let (Some(np), true) = (np, ty != "ClusterIP") {
                        p["nodePort"] = json!(30000 + i64::from(*np));
                    }
                    p
                })
                .collect();
            let mut s = json!({"type": ty, "ports": ports, "selector": {"app": "x"}});
            if let Some(last) = user_ip {
                // 10.0.0.15 is the broadcast address and .16 is outside the /28.
                let a = format!("10.0.0.{last}");
                s["clusterIP"] = json!(a);
                s["clusterIPs"] = json!([a]);
            }
            if ty != "ClusterIP" {
                s["externalTrafficPolicy"] = json!(if local && ty == "LoadBalancer" {
                    "Local"
                } else {
                    "Cluster"
                });
            }
            s
        })
}

fn install(st: &mut AllocationState, holders: &[Holder]) {
    for (n, h) in holders.iter().enumerate() {
        let mut values: Vec<Claim> = h.ips.iter().map(|l| cip(&format!("10.0.0.{l}"))).collect();
        values.extend(
            h.ports
                .iter()
                .map(|p| Claim::NodePort(30000 + i32::from(*p))),
        );
        let owner = if h.own {
            ServiceRef::of_request("ns", "web", "", "earlier-uid")
        } else {
            ServiceRef::named("ns", &format!("other-{n}"))
        };
        let key = match h.kind {
            0 => HolderKey::Service {
                namespace: "ns".into(),
                name: owner.name.clone(),
            },
            1 => HolderKey::Claim {
                name: format!("claim-{n}"),
            },
            _ => HolderKey::IpAddress {
                name: format!("ipaddr-{n}"),
            },
        };
        // Foreign IPAddress objects have no known owner.
        let owner = if h.kind == 2 && !h.own {
            None
        } else {
            Some(owner)
        };
        st.set(key, owner, values);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn mutate_never_hands_out_a_value_held_by_another_and_leaves_no_trace(
        holders in prop::collection::vec(holder(), 0..5),
        spec in spec(),
    ) {
        let mut st = tiny();
        install(&mut st, &holders);
        let snapshot = st.clone();
        let before = marked(&st);
        let req = create(svc("web", spec));
        let me = req.service_ref();
        let d = mutate(&req, &mut st);
        if let MutateDecision::Allow { reserved, patch, .. } = &d {
            for v in reserved {
                prop_assert!(
                    snapshot.held_by_other(*v, &me).is_none(),
                    "{v:?} is held by {:?}", snapshot.held_by_other(*v, &me)
                );
                prop_assert!(st.allocators().has(*v), "{v:?} reserved but not marked");
            }
            // Every value the patch writes is one of the reserved ones.
            let mut doc = req.object.clone();
            json_patch::patch(&mut doc, &patch.0).unwrap();
            let spec = &doc["spec"];
            if let Some(ip) = spec["clusterIP"].as_str().filter(|_| patch.0.iter().any(|o| o.path().as_str() == "/spec/clusterIP")) {
                prop_assert!(reserved.contains(&cip(ip)));
            }
            for (i, p) in spec["ports"].as_array().unwrap().iter().enumerate() {
                let path = format!("/spec/ports/{i}/nodePort");
                if patch.0.iter().any(|o| o.path().as_str() == path) {
                    let np = i32::try_from(p["nodePort"].as_i64().unwrap()).unwrap();
                    prop_assert!(reserved.contains(&Claim::NodePort(np)));
                }
            }
        }
        st.remove(&HolderKey::Pending { request_uid: req.uid.clone() });
        prop_assert_eq!(marked(&st), before);
    }
}
