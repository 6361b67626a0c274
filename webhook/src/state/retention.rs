//! Values retained for a deleted Service's name (beyond upstream; off by default).
//!
//! A Service deleted and created again gets new values upstream: a restore, a GitOps
//! re-create or `kubectl replace --force` all change its ClusterIP, and clients that
//! pinned the old one break. With `--retain-released-values=DURATION` (or the
//! [`RETAIN_RELEASED_VALUES`] annotation on the Service) the claims of a deleted Service
//! are not released but *retained* for its namespace and name for that long: the next
//! Service created under that name asking for automatic values gets them back, every
//! other request gets other values, and at expiry the repair loop releases them.
//!
//! This module holds the pure parts: reading the setting, and remembering which field of
//! the Service each value filled (its [`Role`]), so that a Service with several ports
//! gets each nodePort back on the port that had it.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use svcplane_allocator::Claim;
use svcplane_allocator::duration::parse_duration;
use svcplane_allocator::range::parse_ip_sloppy;

/// Annotation on a Service: how long its values are retained after it is deleted
/// (a Go duration such as `24h`; `0` opts the Service out of `--retain-released-values`).
pub const RETAIN_RELEASED_VALUES: &str = "svcplane.io/retain-released-values";

/// The retention an object's annotations ask for: `Ok(None)` without the annotation,
/// `Ok(Some(ZERO))` to opt out; an error names the annotation and the value.
pub fn annotated(
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Option<Duration>, String> {
    let Some(value) = annotations.and_then(|a| a.get(RETAIN_RELEASED_VALUES)) else {
        return Ok(None);
    };
    parse_duration(value.trim())
        .map(Some)
        .map_err(|e| format!("{RETAIN_RELEASED_VALUES}: {e}; the annotation is ignored"))
}

/// The field of its Service a value filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `spec.clusterIPs[i]`.
    ClusterIp(u8),
    /// The `nodePort` of the port with this number and protocol.
    Port {
        /// `spec.ports[].port`.
        port: i32,
        /// `spec.ports[].protocol`.
        protocol: Protocol,
    },
    /// `spec.healthCheckNodePort`.
    HealthCheck,
}

/// The protocol of a Service port (kept as a small value: every Service's roles are
/// remembered while it lives).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// TCP (also the default when unset).
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "TCP" | "" => Some(Self::Tcp),
            "UDP" => Some(Self::Udp),
            "SCTP" => Some(Self::Sctp),
            _ => None,
        }
    }

    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "TCP",
            Self::Udp => "UDP",
            Self::Sctp => "SCTP",
        }
    }
}

impl fmt::Display for Role {
    /// As stored in a claim: `clusterIPs[0]`, `ports[80/TCP]`, `healthCheckNodePort`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ClusterIp(i) => write!(f, "clusterIPs[{i}]"),
            Self::Port { port, protocol } => write!(f, "ports[{port}/{}]", protocol.as_str()),
            Self::HealthCheck => f.write_str("healthCheckNodePort"),
        }
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("{s:?} is not clusterIPs[N], ports[PORT/PROTOCOL] or healthCheckNodePort");
        if s == "healthCheckNodePort" {
            return Ok(Self::HealthCheck);
        }
        if let Some(i) = s
            .strip_prefix("clusterIPs[")
            .and_then(|r| r.strip_suffix(']'))
        {
            return i.parse().map(Self::ClusterIp).map_err(|_| bad());
        }
        let inner = s
            .strip_prefix("ports[")
            .and_then(|r| r.strip_suffix(']'))
            .ok_or_else(bad)?;
        let (port, protocol) = inner.split_once('/').ok_or_else(bad)?;
        Ok(Self::Port {
            port: port.parse().map_err(|_| bad())?,
            protocol: Protocol::parse(protocol).ok_or_else(bad)?,
        })
    }
}

/// Which field of `svc` holds each of its values (ClusterIPs that do not parse and
/// ports without a nodePort are left out).
pub fn roles_of(svc: &Service) -> Vec<(Claim, Role)> {
    let Some(spec) = svc.spec.as_ref() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, ip) in spec.cluster_ips.iter().flatten().enumerate().take(2) {
        if let (Some(ip), Ok(i)) = (parse_ip_sloppy(ip), u8::try_from(i)) {
            out.push((Claim::Ip(ip), Role::ClusterIp(i)));
        }
    }
    for p in spec.ports.iter().flatten() {
        let protocol = Protocol::parse(p.protocol.as_deref().unwrap_or(""));
        if let (Some(np), Some(protocol)) = (p.node_port.filter(|n| *n > 0), protocol) {
            out.push((
                Claim::NodePort(np),
                Role::Port {
                    port: p.port,
                    protocol,
                },
            ));
        }
    }
    if let Some(hc) = spec.health_check_node_port.filter(|n| *n > 0) {
        out.push((Claim::NodePort(hc), Role::HealthCheck));
    }
    out
}

/// A value retained for a deleted Service, as the admission review sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retained {
    /// The claim object that retains it.
    pub claim: String,
    /// The value.
    pub value: Claim,
    /// The field it filled (`None` when not known: the Service was never seen whole).
    pub role: Option<Role>,
    /// When the retention ends (`None` until a replica has stored it).
    pub until: Option<jiff::Timestamp>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_reads_back_as_it_is_written() {
        for role in [
            Role::ClusterIp(1),
            Role::Port {
                port: 53,
                protocol: Protocol::Udp,
            },
            Role::HealthCheck,
        ] {
            assert_eq!(role.to_string().parse::<Role>(), Ok(role));
        }
        assert!(
            "ports[80]"
                .parse::<Role>()
                .unwrap_err()
                .contains("ports[80]")
        );
    }

    #[test]
    fn the_annotation_takes_a_go_duration_and_zero_opts_out() {
        let of = |v: &str| {
            let a = BTreeMap::from([(RETAIN_RELEASED_VALUES.to_owned(), v.to_owned())]);
            annotated(Some(&a))
        };
        assert_eq!(of("1h30m"), Ok(Some(Duration::from_secs(5400))));
        assert_eq!(of("0"), Ok(Some(Duration::ZERO)));
        assert_eq!(annotated(None), Ok(None));
        let e = of("a day").unwrap_err();
        assert!(
            e.contains(RETAIN_RELEASED_VALUES) && e.contains("a day"),
            "{e}"
        );
    }

    #[test]
    fn roles_name_the_field_each_value_filled() {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "type": "LoadBalancer",
                "clusterIPs": ["10.96.0.10", "fd00::10"],
                "ports": [
                    {"port": 80, "nodePort": 30080},
                    {"port": 53, "protocol": "UDP", "nodePort": 30053},
                    {"port": 9, "protocol": "TCP"}
                ],
                "healthCheckNodePort": 30999
            }
        }))
        .unwrap();
        let roles: Vec<String> = roles_of(&svc)
            .iter()
            .map(|(v, r)| format!("{v:?} {r}"))
            .collect();
        assert_eq!(
            roles,
            [
                "Ip(10.96.0.10) clusterIPs[0]",
                "Ip(fd00::10) clusterIPs[1]",
                "NodePort(30080) ports[80/TCP]",
                "NodePort(30053) ports[53/UDP]",
                "NodePort(30999) healthCheckNodePort",
            ]
        );
    }
}
