//! `svcplane rbac`: the RBAC objects `svcplane run` needs with a given set of flags.
//!
//! The flags are `run`'s own and go through the same [`RunOptions::from_args`] as a
//! real run, so what is printed follows what that run would do: the enabled
//! controllers, the webhook, self-managed certificates, the secure metrics port and
//! leader election. For installs without the chart's RBAC (`rbac.create=false`), and
//! as the reference the chart's rules are tested against.

use std::collections::BTreeMap;
use std::fmt::Write;

use svcplane_webhook::shell::certs::CertPlan;

use crate::cli::RbacArgs;
use crate::run_cmd::RunOptions;
use crate::shell::access::{self, ProcessNeeds, Rule, SelfManagedCerts};
use crate::shell::registry;

/// What a run with `options` needs beyond its controllers.
pub fn process_needs(options: &RunOptions) -> ProcessNeeds {
    let webhook = options.webhook.as_ref();
    ProcessNeeds {
        webhook: webhook.is_some(),
        self_managed_certs: webhook.and_then(|w| match &w.serving.certs {
            CertPlan::SelfManaged {
                namespace,
                name,
                configuration,
                ..
            } => Some(SelfManagedCerts {
                namespace: namespace.clone(),
                secret: name.clone(),
                configuration: configuration.clone(),
            }),
            CertPlan::Files { .. } => None,
        }),
        secure_metrics: options.secure_metrics.is_some(),
        lease: options
            .leader
            .as_ref()
            .map(|l| (l.namespace.clone(), l.name.clone())),
    }
}

/// Every rule a run with `options` needs, merged.
pub fn rules(options: &RunOptions) -> Vec<Rule> {
    let controllers = options
        .controllers
        .enabled
        .iter()
        .flat_map(|name| registry::grants_of(name));
    access::merge(controllers.chain(access::process_grants(&process_needs(options))))
}

/// `svcplane rbac`: the objects as YAML documents.
pub fn run(args: &RbacArgs) -> anyhow::Result<String> {
    let options = RunOptions::from_args(&args.run)?;
    let subject_namespace =
        crate::process::namespace_or_pod(args.service_account_namespace.as_deref());
    Ok(render(
        &rules(&options),
        &args.name,
        &args.service_account,
        &subject_namespace,
    ))
}

/// `s` as a double-quoted scalar: a JSON string is valid YAML, and names come from
/// flags, so nothing in them may break the document.
fn quoted(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// A YAML flow sequence of quoted strings.
fn list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let quoted: Vec<String> = items.into_iter().map(quoted).collect();
    format!("[{}]", quoted.join(", "))
}

fn rule_yaml(out: &mut String, r: &Rule) {
    for why in &r.why {
        let _ = writeln!(out, "  # {why}");
    }
    let _ = writeln!(out, "  - apiGroups: {}", list([r.group]));
    let _ = writeln!(out, "    resources: {}", list([r.resource]));
    if !r.names.is_empty() {
        let _ = writeln!(
            out,
            "    resourceNames: {}",
            list(r.names.iter().map(String::as_str))
        );
    }
    let _ = writeln!(out, "    verbs: {}", list(r.verbs.iter().copied()));
}

/// The ClusterRole and its binding, then a Role and binding per namespace, bound to
/// the ServiceAccount `sa` in `sa_namespace`.
fn render(rules: &[Rule], name: &str, sa: &str, sa_namespace: &str) -> String {
    let mut by_namespace: BTreeMap<Option<&str>, Vec<&Rule>> = BTreeMap::new();
    for r in rules {
        by_namespace
            .entry(r.namespace.as_deref())
            .or_default()
            .push(r);
    }
    let mut out = String::from(
        "# What `svcplane run` needs with these flags (svcplane rbac); apply with kubectl apply -f -\n",
    );
    let (name, sa, sa_namespace) = (quoted(name), quoted(sa), quoted(sa_namespace));
    for (namespace, rules) in by_namespace {
        let (kind, meta_ns) = match namespace {
            None => ("ClusterRole", String::new()),
            Some(ns) => ("Role", format!("\n  namespace: {}", quoted(ns))),
        };
        let _ = write!(
            out,
            "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}\nmetadata:\n  name: {name}{meta_ns}\nrules:\n"
        );
        for r in rules {
            rule_yaml(&mut out, r);
        }
        let _ = write!(
            out,
            "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}Binding\nmetadata:\n  name: {name}{meta_ns}\n\
             roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: {kind}\n  name: {name}\n\
             subjects:\n  - kind: ServiceAccount\n    name: {sa}\n    namespace: {sa_namespace}\n"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn rules_for(args: &[&str]) -> Vec<Rule> {
        let cli = Cli::try_parse_from(["svcplane", "rbac"].iter().chain(args)).unwrap();
        let Command::Rbac(a) = cli.command else {
            panic!("not rbac")
        };
        rules(&RunOptions::from_args(&a.run).unwrap())
    }

    fn has(rules: &[Rule], group: &str, resource: &str, verb: &str) -> bool {
        rules
            .iter()
            .any(|r| r.group == group && r.resource == resource && r.verbs.contains(verb))
    }

    const NO_WEBHOOK: &[&str] = &["--webhook=false", "--leader-elect=false"];

    #[test]
    fn owner_references_need_the_owners_finalizers() {
        // OwnerReferencesPermissionEnforcement: a slice owned by its Service (or a
        // mirrored slice by its Endpoints) with blockOwnerDeletion is refused without
        // `update` on the owner's finalizers.
        let r = rules_for(NO_WEBHOOK);
        assert!(has(&r, "", "services/finalizers", "update"));
        assert!(has(&r, "", "endpoints/finalizers", "update"));
        assert!(has(&r, "", "endpoints/restricted", "create"));
    }

    #[test]
    fn a_controller_switched_off_takes_its_access_along() {
        let only_slices = [NO_WEBHOOK, &["--controllers=endpointslice"]].concat();
        let r = rules_for(&only_slices);
        assert!(has(&r, "discovery.k8s.io", "endpointslices", "create"));
        assert!(!has(&r, "", "endpoints", "create"));
        assert!(!has(&r, "", "endpoints", "list"));
        assert!(!has(&r, "", "endpoints/finalizers", "update"));
        let no_mirroring = [
            NO_WEBHOOK,
            &["--controllers=*,-endpointslice-mirroring-controller"],
        ]
        .concat();
        assert!(!has(
            &rules_for(&no_mirroring),
            "",
            "endpoints/finalizers",
            "update"
        ));
    }

    #[test]
    fn the_service_cidr_controller_patches_only_when_it_runs() {
        assert!(!has(
            &rules_for(NO_WEBHOOK),
            "networking.k8s.io",
            "servicecidrs",
            "patch"
        ));
        let on = [NO_WEBHOOK, &["--controllers=*,servicecidr"]].concat();
        let r = rules_for(&on);
        assert!(has(&r, "networking.k8s.io", "servicecidrs", "patch"));
        assert!(has(&r, "networking.k8s.io", "servicecidrs/status", "patch"));
        assert!(has(&r, "networking.k8s.io", "ipaddresses", "watch"));
    }

    #[test]
    fn the_webhook_needs_claims_and_self_managed_certificates_their_secret() {
        let r = rules_for(&["--tls-secret-name=certs", "--leader-elect=false"]);
        assert!(has(&r, "svcplane.io", "allocationclaims", "create"));
        let secret = r
            .iter()
            .find(|r| r.resource == "secrets" && !r.names.is_empty())
            .unwrap();
        assert_eq!(secret.names, ["certs"]);
        assert!(secret.namespace.is_some());
    }

    #[test]
    fn no_rule_uses_a_wildcard_or_deletecollection() {
        let all = rules_for(&[
            "--controllers=*,servicecidr",
            "--tls-secret-name=certs",
            "--secure-metrics-bind-address=0.0.0.0:10257",
        ]);
        for r in &all {
            assert!(!r.resource.contains('*') && !r.group.contains('*'), "{r:?}");
            assert!(
                !r.verbs.contains("*") && !r.verbs.contains("deletecollection"),
                "{r:?}"
            );
        }
    }

    #[test]
    fn the_yaml_binds_each_role_to_the_service_account() {
        let r = rules_for(&[
            "--tls-secret-name=certs",
            "--tls-secret-namespace=ops",
            "--leader-elect-resource-namespace=ops",
        ]);
        let yaml = render(&r, "svcplane", "svcplane", "ops");
        let docs: Vec<serde_json::Value> = yaml
            .split("\n---\n")
            .filter(|d| d.contains("kind:"))
            .map(|d| serde_saphyr::from_str(d).unwrap())
            .collect();
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
        );
        assert_eq!(docs[2]["metadata"]["namespace"], "ops");
        assert_eq!(docs[3]["subjects"][0]["namespace"], "ops");
        assert!(!docs[0]["rules"].as_array().unwrap().is_empty());
    }

    #[test]
    fn names_from_flags_cannot_break_the_yaml() {
        let r = rules_for(&["--tls-secret-name=a: b", "--leader-elect=false"]);
        let yaml = render(&r, "x: y", "sa\n- kind: User", "ns");
        let docs: Vec<serde_json::Value> = yaml
            .split("\n---\n")
            .filter(|d| d.contains("kind:"))
            .map(|d| serde_saphyr::from_str(d).unwrap())
            .collect();
        assert_eq!(docs[0]["metadata"]["name"], "x: y");
        assert_eq!(docs[1]["subjects"].as_array().unwrap().len(), 1);
        assert_eq!(docs[1]["subjects"][0]["name"], "sa\n- kind: User");
        let secret = docs
            .iter()
            .flat_map(|d| d["rules"].as_array().cloned().unwrap_or_default())
            .find(|r| r["resourceNames"].is_array() && r["resources"][0] == "secrets")
            .unwrap();
        assert_eq!(secret["resourceNames"][0], "a: b");
    }
}
