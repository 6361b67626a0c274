//! The identity this replica writes into `holderIdentity`.
//!
//! Why: the identity must be unique among the replicas and readable by humans
//! (`kubectl get lease` shows it). The pod name, from the downward API, is both; outside a
//! pod (a developer's machine) the hostname will do, and the process id is a last resort.

/// Where the hostname lives on Linux; read directly so no crate is needed.
const HOSTNAME_FILE: &str = "/proc/sys/kernel/hostname";

/// `POD_NAME` if set and non-empty, else the hostname (`/proc/sys/kernel/hostname`, then
/// `HOSTNAME`), else `svcplane-<pid>`.
pub fn identity_from_env() -> String {
    identity_from(
        std::env::var("POD_NAME").ok(),
        std::fs::read_to_string(HOSTNAME_FILE).ok(),
        std::env::var("HOSTNAME").ok(),
        std::process::id(),
    )
}

/// Whether this replica is a Pod in `lease_namespace` whose identity is its Pod name
/// (the chart's downward-API `POD_NAME` and `POD_NAMESPACE`): then the other holders of
/// the Lease are Pods there too, and one that no longer exists can be told apart from
/// one that is slow (`gone_holder.rs`).
pub fn pods_hold_the_lease(identity: &str, lease_namespace: &str) -> bool {
    pods_hold(
        std::env::var("POD_NAME").ok().as_deref(),
        std::env::var("POD_NAMESPACE").ok().as_deref(),
        identity,
        lease_namespace,
    )
}

fn pods_hold(
    pod_name: Option<&str>,
    pod_namespace: Option<&str>,
    identity: &str,
    lease_namespace: &str,
) -> bool {
    pod_name.map(str::trim) == Some(identity)
        && !identity.is_empty()
        && pod_namespace.map(str::trim) == Some(lease_namespace)
}

/// The choice behind [`identity_from_env`], with its inputs passed in.
fn identity_from(
    pod_name: Option<String>,
    hostname_file: Option<String>,
    hostname_env: Option<String>,
    pid: u32,
) -> String {
    [pod_name, hostname_file, hostname_env]
        .into_iter()
        .flatten()
        // The hostname file ends with a newline.
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| format!("svcplane-{pid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_pods_only_for_a_pod_named_as_its_identity_in_the_lease_namespace() {
        assert!(pods_hold(
            Some("svcplane-1-a"),
            Some("kube-system"),
            "svcplane-1-a",
            "kube-system"
        ));
        assert!(!pods_hold(
            Some("svcplane-1-a"),
            Some("ops"),
            "svcplane-1-a",
            "kube-system"
        ));
        assert!(!pods_hold(
            None,
            Some("kube-system"),
            "laptop",
            "kube-system"
        ));
        assert!(!pods_hold(
            Some("svcplane-1-a"),
            None,
            "svcplane-1-a",
            "kube-system"
        ));
        assert!(!pods_hold(Some(""), Some("kube-system"), "", "kube-system"));
    }

    fn s(v: &str) -> Option<String> {
        Some(v.to_string())
    }

    #[test]
    fn pod_name_wins() {
        assert_eq!(
            identity_from(s("svcplane-7d9f-abcde"), s("node-1\n"), s("h"), 7),
            "svcplane-7d9f-abcde"
        );
    }

    #[test]
    fn empty_pod_name_falls_back_to_hostname_file() {
        assert_eq!(identity_from(s(""), s("node-1\n"), s("h"), 7), "node-1");
    }

    #[test]
    fn hostname_env_when_file_missing_or_blank() {
        assert_eq!(identity_from(None, None, s("laptop"), 7), "laptop");
        assert_eq!(identity_from(None, s("\n"), s("laptop"), 7), "laptop");
    }

    #[test]
    fn pid_last() {
        assert_eq!(identity_from(None, None, s(" "), 42), "svcplane-42");
    }

    #[test]
    fn from_env_is_never_empty() {
        assert!(!identity_from_env().is_empty());
    }
}
