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
