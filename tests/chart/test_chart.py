"""Property checks on the rendered svcplane chart (what charts/svcplane/README.md promises).

Renders the chart offline (helm-python-sdk, no helm binary, no cluster) with
the default values and with every charts/svcplane/ci/*.yaml variant, then
checks the objects. Run through `bash tests/chart/run.sh`, or directly:
`python -m pytest tests/chart -q` inside a venv with the pinned packages.
"""

from __future__ import annotations

import base64
import copy
import functools
import os
import pathlib
import re
import shutil
import subprocess
import sys

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
CHART = REPO / "charts" / "svcplane"
sys.path.insert(0, str(HERE))
import render as chart_render  # noqa: E402

NAMESPACE = chart_render.NAMESPACE
CI_VARIANTS = sorted(p.name for p in (CHART / "ci").glob("*.yaml"))
VARIANTS = ["default"] + CI_VARIANTS
KUBE_VERSIONS = ["1.33", "1.37"]
# Kinds without a schema in kubernetes-validate (CRDs of other projects);
# kubernetes-validate only warns about them, so they are checked by hand below.
FOREIGN_KINDS = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate"),
                 ("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
KCM_FLAG = "--controllers=*,-endpointslice,-endpoint,-endpointslicemirroring"


# ---------------------------------------------------------------- rendering


def variant_values(variant: str) -> dict:
    if variant == "default":
        return {}
    return chart_render.load_values(str(CHART / "ci" / variant))


def render_objects(values: dict, notes: dict | None = None, namespace: str = NAMESPACE) -> list[dict]:
    docs = chart_render.render_values(str(CHART), values, notes, namespace)
    return [yaml.safe_load(d) for d in docs]


@functools.cache
def _rendered(variant: str) -> tuple[list[dict], str]:
    notes: dict = {}
    objs = render_objects(variant_values(variant), notes)
    return objs, notes.get("text", "")


def objects(variant: str) -> list[dict]:
    return copy.deepcopy(_rendered(variant)[0])


@functools.cache
def merged_values(variant: str) -> dict:
    with helm.Chart.load(str(CHART)) as chart:
        return chart.merge_values(variant_values(variant))


def of_kind(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in of_kind(objs, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected exactly one {kind} {name or ''}, found {len(found)}"
    return found[0]


def deployment(objs: list[dict]) -> dict:
    return one(objs, "Deployment")


def container(objs: list[dict]) -> dict:
    containers = deployment(objs)["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def flags(objs: list[dict]) -> dict[str, str]:
    """`--name=value` args of the container as {name: value}; also checks `run` comes first."""
    args = container(objs)["args"]
    assert args[0] == "run", "the image's entrypoint is /svcplane; the first arg must be the run subcommand"
    out: dict[str, str] = {}
    for a in args[1:]:
        m = re.fullmatch(r"--([a-z0-9-]+)=(.*)", a)
        assert m, f"arg {a!r} is not --flag=value"
        assert m.group(1) not in out, f"flag --{m.group(1)} given twice"
        out[m.group(1)] = m.group(2)
    return out


def seconds(duration: str) -> float:
    """A Go duration (what the binary and kube-controller-manager parse), in seconds."""
    if duration == "0":
        return 0.0
    unit = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 0.001, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"([0-9]*\.?[0-9]*)(ns|us|µs|μs|ms|s|m|h)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, f"bad duration {duration!r}"
    return sum(float(n) * unit[u] for n, u in parts)


def webhook_entries(objs: list[dict]) -> list[tuple[str, dict]]:
    out = []
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for cfg in of_kind(objs, kind):
            out += [(kind, w) for w in cfg["webhooks"]]
    return out


def webhook_enabled(variant: str) -> bool:
    return merged_values(variant)["webhook"]["enabled"]


def cert_mode(variant: str) -> str | None:
    v = merged_values(variant)["webhook"]
    return v["certMode"] if v["enabled"] else None


# ------------------------------------------------------- variants / validity


def test_every_mode_has_a_ci_variant():
    modes = {cert_mode(v) for v in CI_VARIANTS}
    assert {"helm", "cert-manager", "secret", None} <= modes, f"ci/ misses a mode: {modes}"
    assert any(merged_values(v)["webhook"]["excludeNamespaces"] == [] for v in CI_VARIANTS), \
        "ci/ needs a generic-control-plane variant with webhook.excludeNamespaces: []"


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_renders_and_validates_strictly(variant, kube):
    objs = objects(variant)
    assert objs
    errors = []
    for o in objs:
        key = f"{o['kind']}/{o['metadata']['name']}"
        try:
            kubernetes_validate.validate(o, kube, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            if (o["apiVersion"], o["kind"]) not in FOREIGN_KINDS:
                errors.append(f"{key}: no schema for {o['apiVersion']} in Kubernetes {kube}")
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{key}: {str(e).splitlines()[0]}")
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("variant", VARIANTS)
def test_everything_in_the_release_namespace_or_cluster_scoped(variant):
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                      "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    for o in objects(variant):
        if o["kind"] in cluster_scoped:
            assert "namespace" not in o["metadata"], o["kind"]
        else:
            assert o["metadata"].get("namespace") == NAMESPACE, f"{o['kind']}/{o['metadata']['name']}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_labels(variant):
    required = {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
                "app.kubernetes.io/managed-by", "helm.sh/chart"}
    objs = objects(variant)
    for o in objs:
        missing = required - set(o["metadata"].get("labels", {}))
        assert not missing, f"{o['kind']}/{o['metadata']['name']} lacks {missing}"
    selector = {"app.kubernetes.io/name": "svcplane", "app.kubernetes.io/instance": "svcplane"}
    d = deployment(objs)
    assert d["spec"]["selector"] == {"matchLabels": selector}
    for svc in of_kind(objs, "Service"):
        assert svc["spec"]["selector"] == selector
    pdb = of_kind(objs, "PodDisruptionBudget")
    assert all(p["spec"]["selector"] == {"matchLabels": selector} for p in pdb)


# ---------------------------------------------------------------- workload


def test_default_has_two_replicas():
    assert deployment(objects("default"))["spec"]["replicas"] == 2


@pytest.mark.parametrize("variant", VARIANTS)
def test_replicas_follow_values(variant):
    assert deployment(objects(variant))["spec"]["replicas"] == merged_values(variant)["replicaCount"] >= 1


@pytest.mark.parametrize("variant", VARIANTS)
def test_pdb_only_when_it_cannot_block_a_drain(variant):
    values = merged_values(variant)
    pdbs = of_kind(objects(variant), "PodDisruptionBudget")
    budget = values["podDisruptionBudget"]
    if not budget["enabled"] or values["replicaCount"] <= budget["minAvailable"]:
        assert not pdbs, "a PDB with replicas <= minAvailable would block every drain"
        return
    (pdb,) = pdbs
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["minAvailable"] == budget["minAvailable"] < values["replicaCount"]
    assert "maxUnavailable" not in pdb["spec"]
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_one_replica_renders_no_pdb_and_there_is_such_a_variant():
    assert not of_kind(render_objects({"replicaCount": 1}), "PodDisruptionBudget")
    assert of_kind(render_objects({"replicaCount": 3, "podDisruptionBudget": {"enabled": True, "minAvailable": 2}}),
                   "PodDisruptionBudget")
    assert not of_kind(render_objects({"replicaCount": 2, "podDisruptionBudget": {"enabled": True, "minAvailable": 2}}),
                       "PodDisruptionBudget")
    assert any(merged_values(v)["replicaCount"] == 1 for v in CI_VARIANTS)


@pytest.mark.parametrize("variant", VARIANTS)
def test_pod_scheduling(variant):
    spec = deployment(objects(variant))["spec"]["template"]["spec"]
    values = merged_values(variant)
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in spec["tolerations"]
    assert spec.get("affinity", {}) == values["affinity"]
    tsc = spec["topologySpreadConstraints"]
    assert any(c["topologyKey"] == "kubernetes.io/hostname" and c["whenUnsatisfiable"] == "ScheduleAnyway"
               and c["labelSelector"]["matchLabels"] == deployment(objects(variant))["spec"]["selector"]["matchLabels"]
               for c in tsc), tsc


@pytest.mark.parametrize("variant", VARIANTS)
def test_resources_memory_limit_no_cpu_limit(variant):
    res = container(objects(variant))["resources"]
    assert {"cpu", "memory"} <= set(res["requests"])
    assert "memory" in res["limits"]
    assert "cpu" not in res["limits"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_termination_grace_exceeds_shutdown_drain(variant):
    objs = objects(variant)
    grace = deployment(objs)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > seconds(flags(objs)["shutdown-grace-period"])


@pytest.mark.parametrize("variant", VARIANTS)
def test_security_context(variant):
    objs = objects(variant)
    values = merged_values(variant)
    pod = deployment(objs)["spec"]["template"]["spec"]
    psc = pod["securityContext"]
    assert psc == values["podSecurityContext"], "the pod securityContext is the value, as merged"
    assert psc["runAsNonRoot"] is True, "no variant may run as root"
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    c = container(objs)
    csc = c["securityContext"]
    assert csc == values["containerSecurityContext"]
    assert csc["allowPrivilegeEscalation"] is False
    assert csc["readOnlyRootFilesystem"] is True
    assert csc["capabilities"] == {"drop": ["ALL"]}
    assert csc.get("privileged", False) is False
    assert "runAsUser" not in csc or csc["runAsUser"] != 0
    extra = {m["name"] for m in values["extraVolumeMounts"]}
    for m in c.get("volumeMounts", []):
        if m["name"] not in extra:
            assert m.get("readOnly") is True, f"volume mount {m['name']} must be read-only"
    assert bool(pod.get("hostNetwork")) == values["hostNetwork"]
    assert not pod.get("hostPID") and not pod.get("hostIPC")


def test_default_security_context_is_hardened_and_overrides_drop_keys():
    pod = deployment(objects("default"))["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                      "fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
    restricted = deployment(objects("restricted-values.yaml"))["spec"]["template"]["spec"]["securityContext"]
    assert restricted == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}, \
        "null removes runAsUser/runAsGroup/fsGroup (UIDs assigned by the platform)"


@pytest.mark.parametrize("variant", VARIANTS)
def test_host_network_uses_the_nodes_dns_and_distinct_ports(variant):
    values = merged_values(variant)
    spec = deployment(objects(variant))["spec"]["template"]["spec"]
    if values["hostNetwork"]:
        assert spec["hostNetwork"] is True
        assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
        assert values["metrics"]["port"] != values["webhook"]["port"]
        # 8080 and 9443 are taken on many nodes; the variant shows picking others.
        assert values["metrics"]["port"] not in (8080, 10250) and values["webhook"]["port"] != 9443
        # 10257 is kube-controller-manager's secure port on control-plane nodes.
        secure = values["metrics"]["secure"]
        if secure["enabled"]:
            assert secure["port"] not in (10250, 10257, 10259, values["metrics"]["port"], values["webhook"]["port"])
    else:
        assert "hostNetwork" not in spec and "dnsPolicy" not in spec


def test_there_is_a_host_network_variant():
    assert any(merged_values(v)["hostNetwork"] for v in CI_VARIANTS)


@pytest.mark.parametrize("variant", VARIANTS)
def test_update_strategy_history_and_extra_volumes(variant):
    values = merged_values(variant)
    d = deployment(objects(variant))
    assert d["spec"]["strategy"] == values["updateStrategy"]
    assert d["spec"]["revisionHistoryLimit"] == values["revisionHistoryLimit"]
    spec = d["spec"]["template"]["spec"]
    own = {"webhook-tls", "metrics-tls"}
    vols = [v for v in spec.get("volumes", []) if v["name"] not in own]
    assert vols == values["extraVolumes"]
    mounts = [m for m in container(objects(variant)).get("volumeMounts", []) if m["name"] not in own]
    assert mounts == values["extraVolumeMounts"]


def test_defaults_never_lose_webhook_capacity_in_a_rollout():
    d = deployment(objects("default"))
    assert d["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    assert any(merged_values(v)["extraVolumes"] for v in CI_VARIANTS), "a variant with extra volumes"
    assert any(merged_values(v)["updateStrategy"] != merged_values("default")["updateStrategy"]
               for v in CI_VARIANTS)


@pytest.mark.parametrize("variant", VARIANTS)
def test_network_policy(variant):
    values = merged_values(variant)
    np = values["networkPolicy"]
    pols = of_kind(objects(variant), "NetworkPolicy")
    if not np["enabled"]:
        assert not pols
        return
    (pol,) = pols
    assert pol["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "svcplane",
                                                          "app.kubernetes.io/instance": "svcplane"}}
    rules = pol["spec"]["ingress"]
    by_port = {r["ports"][0]["port"]: r for r in rules}
    assert set(by_port) == ({"webhook", "admin"} if values["webhook"]["enabled"] else {"admin"})
    assert by_port["admin"].get("from", []) == np["metricsFrom"]
    # The probes stay on admin; the secure metrics port is open to the same peers.
    want = [{"port": "admin", "protocol": "TCP"}]
    if values["metrics"]["secure"]["enabled"]:
        want.append({"port": "https-metrics", "protocol": "TCP"})
    assert by_port["admin"]["ports"] == want
    if values["webhook"]["enabled"]:
        assert by_port["webhook"].get("from", []) == np["webhookFrom"]
    if np["egress"]:
        assert pol["spec"]["policyTypes"] == ["Ingress", "Egress"]
        assert pol["spec"]["egress"] == np["egress"]
    else:
        assert pol["spec"]["policyTypes"] == ["Ingress"], "egress unrestricted unless rules are given"


def test_there_is_a_network_policy_variant():
    assert any(merged_values(v)["networkPolicy"]["enabled"] for v in CI_VARIANTS)


@pytest.mark.parametrize("variant", VARIANTS)
def test_probes_on_named_admin_port(variant):
    objs = objects(variant)
    c = container(objs)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["admin"] == int(flags(objs)["metrics-bind-address"].rsplit(":", 1)[1])
    live, ready = c["livenessProbe"], c["readinessProbe"]
    assert live["httpGet"]["path"] == "/livez" and live["httpGet"]["port"] == "admin"
    assert ready["httpGet"]["path"] == "/readyz" and ready["httpGet"]["port"] == "admin"
    assert ready["periodSeconds"] <= 5, "readiness gates the webhook endpoints: keep its period short"
    assert live["failureThreshold"] * live["periodSeconds"] >= 30, "liveness must be generous"


@pytest.mark.parametrize("variant", VARIANTS)
def test_downward_api_env(variant):
    env = {e["name"]: e for e in container(objects(variant))["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["RUST_LOG"]["value"] == merged_values(variant)["logging"]["level"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_verbosity_flag(variant):
    v = merged_values(variant)["logging"].get("verbosity")
    f = flags(objects(variant))
    if v is None:
        assert "v" not in f
    else:
        assert f["v"] == str(v)


def test_there_is_a_verbosity_variant():
    assert any(merged_values(v)["logging"].get("verbosity") is not None for v in CI_VARIANTS)


@pytest.mark.parametrize("variant", VARIANTS)
def test_leader_election_flags(variant):
    objs = objects(variant)
    f = flags(objs)
    le = merged_values(variant)["leaderElection"]
    assert f["leader-elect"] == "true"
    assert f["leader-elect-lease-duration"] == le["leaseDuration"]
    assert f["leader-elect-renew-deadline"] == le["renewDeadline"]
    assert f["leader-elect-retry-period"] == le["retryPeriod"]
    assert f["leader-elect-resource-namespace"] == NAMESPACE
    assert f["leader-elect-resource-name"] == (le.get("resourceName") or "svcplane")
    assert seconds(f["leader-elect-renew-deadline"]) < seconds(f["leader-elect-lease-duration"])


# -------------------------------------------------------------------- RBAC


def rules(objs: list[dict], kind: str) -> list[dict]:
    return [r for o in of_kind(objs, kind) for r in o["rules"]]


@pytest.mark.parametrize("variant", VARIANTS)
def test_rbac_has_no_wildcards(variant):
    objs = objects(variant)
    all_rules = rules(objs, "ClusterRole") + rules(objs, "Role")
    assert all_rules
    for r in all_rules:
        for field in ("verbs", "resources", "apiGroups", "resourceNames", "nonResourceURLs"):
            for item in r.get(field, []):
                assert "*" not in item, f"wildcard in {field}: {r}"
        assert "deletecollection" not in r["verbs"], r
        assert "escalate" not in r["verbs"] and "bind" not in r["verbs"] and "impersonate" not in r["verbs"]
        if "secrets" in r.get("resources", []):
            # certMode=self only: create (cannot be named) and its own Secret by name.
            assert cert_mode(variant) == "self", "secrets are only touched in certMode self"
            assert r["resources"] == ["secrets"]
            assert r["verbs"] == ["create"] or (r["verbs"] == ["get", "update"]
                                                and r["resourceNames"] == ["svcplane-webhook-certs"]), r
        assert "delete" not in r["verbs"] or r.get("resources") != ["secrets"]


def grants(rule_list: list[dict]) -> set[tuple]:
    """Resource grants; nonResourceURLs rules (the metrics reader's) are checked on their own."""
    return {(g, res, verb, tuple(r.get("resourceNames", [])))
            for r in rule_list if "nonResourceURLs" not in r
            for g in r["apiGroups"] for res in r["resources"] for verb in r["verbs"]}


def g(group, resources, verbs, names=()):
    return {(group, r, v, tuple(names)) for r in resources for v in verbs}


def test_the_service_cidr_controller_gets_its_writes_only_when_enabled():
    for controllers in (["*", "servicecidr"], ["endpointslice", "service-cidr-controller"]):
        got = grants(rules(render_objects({"controllers": controllers}), "ClusterRole"))
        assert g("networking.k8s.io", ["servicecidrs", "servicecidrs/status"], ["patch"]) <= got, controllers
    got = grants(rules(render_objects({"controllers": ["*"]}), "ClusterRole"))
    assert not any(res.startswith("servicecidrs") and verb == "patch" for (_, res, verb, _) in got)


def test_owners_finalizers_are_granted_for_owner_references_permission_enforcement():
    """Slices and mirrored slices set blockOwnerDeletion on their owner reference; with the
    OwnerReferencesPermissionEnforcement admission plugin that needs `update` on the owner's
    finalizers (kube-controller-manager's bootstrap roles grant the same)."""
    got = grants(rules(objects("default"), "ClusterRole"))
    assert g("", ["services/finalizers", "endpoints/finalizers"], ["update"]) <= got
    assert g("", ["endpoints/restricted"], ["create"]) <= got
    got = grants(rules(render_objects({"controllers": ["endpoints"]}), "ClusterRole"))
    assert not {x for x in got if x[1].endswith("/finalizers")}, got


def tuples(rule_list: list[dict], namespace: str | None) -> set[tuple]:
    """(namespace, group, resource, verb, resourceName) for every combination a rule grants."""
    return {(namespace, grp, res, verb, name)
            for r in rule_list if "nonResourceURLs" not in r
            for grp in r["apiGroups"] for res in r["resources"] for verb in r["verbs"]
            for name in (r.get("resourceNames") or [None])}


def bound_grants(objs: list[dict], subject: dict) -> set[tuple]:
    """Everything the chart's roles grant `subject` (a binding subject), as tuples."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
             for o in objs if o["kind"] in ("ClusterRole", "Role")}
    out: set[tuple] = set()
    for b in objs:
        if b["kind"] not in ("ClusterRoleBinding", "RoleBinding") or subject not in b["subjects"]:
            continue
        ref = b["roleRef"]
        ns = b["metadata"].get("namespace") if ref["kind"] == "Role" else None
        out |= tuples(roles[(ref["kind"], ns, ref["name"])]["rules"], ns)
    return out


def svcplane_rbac(binary: pathlib.Path, run_args: list[str]) -> list[dict]:
    """`svcplane rbac <run args>` as the Deployment's Pod would run it (POD_NAMESPACE set)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVCPLANE_")}
    env.update(POD_NAME="svcplane-test", POD_NAMESPACE=NAMESPACE)
    result = subprocess.run([str(binary), "rbac", "--service-account-namespace", NAMESPACE, *run_args],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, f"svcplane rbac {run_args} failed:\n{result.stderr}"
    return [d for d in yaml.safe_load_all(result.stdout) if d]


RBAC_CASES = [(v, None) for v in VARIANTS] + [
    ("default", {"controllers": ["endpointslice"]}),
    ("default", {"controllers": ["*", "-endpointslice-mirroring-controller"]}),
    ("default", {"controllers": ["endpoints-controller", "servicecidr"]}),
    ("default", {"controllers": ["*", "service-cidr-controller", "-endpoint"]}),
    ("default", {"controllers": ["allocator-repair"], "webhook": {"enabled": False}}),
    ("default", {"replicaCount": 1, "leaderElection": {"enabled": False}}),
    ("default", {"metrics": {"secure": {"enabled": False}}}),
]


@pytest.mark.parametrize("variant,overrides", RBAC_CASES)
def test_chart_rbac_is_exactly_what_svcplane_rbac_says_the_rendered_flags_need(variant, overrides):
    """Both ways: the chart grants the Deployment's ServiceAccount everything `svcplane rbac`
    prints for the Deployment's own args (the code's access table), and nothing more."""
    binary = run_capable_binary()
    if overrides is None:
        objs = objects(variant)
    else:
        objs = render_objects({**variant_values(variant), **overrides})
    args = container(objs)["args"]
    assert args[0] == "run"
    sa = deployment(objs)["spec"]["template"]["spec"]["serviceAccountName"]
    subject = {"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}
    chart = bound_grants(objs, subject)
    printed = svcplane_rbac(binary, args[1:])
    want = bound_grants(printed, {"kind": "ServiceAccount", "name": "svcplane", "namespace": NAMESPACE})
    assert want, printed
    assert not want - chart, f"the code needs what the chart does not grant: {sorted(want - chart, key=str)}"
    assert not chart - want, f"the chart grants what the code never uses: {sorted(chart - want, key=str)}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_lease_role_cert_manager_shape(variant):
    objs = objects(variant)
    lease = flags(objs)["leader-elect-resource-name"]
    role = one(objs, "Role", "svcplane-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    create = [r for r in role["rules"] if "create" in r["verbs"]]
    assert create == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}]
    named = [r for r in role["rules"] if "create" not in r["verbs"] and r["resources"] == ["leases"]]
    assert named == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                      "resourceNames": [lease], "verbs": ["get", "update"]}]
    # A Lease whose holder Pod is gone (uninstall + install) is taken over at once.
    pods = [r for r in role["rules"] if r["resources"] == ["pods"]]
    assert pods == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    assert len(role["rules"]) == 3
    sa = one(objs, "ServiceAccount", "svcplane")["metadata"]["name"]
    assert deployment(objs)["spec"]["template"]["spec"]["serviceAccountName"] == sa
    for kind, ref_kind, ref_name, name in (
            ("RoleBinding", "Role", role["metadata"]["name"], "svcplane-leader-election"),
            ("ClusterRoleBinding", "ClusterRole", one(objs, "ClusterRole", "svcplane")["metadata"]["name"], "svcplane")):
        b = one(objs, kind, name)
        assert b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": ref_kind, "name": ref_name}
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]


# ----------------------------------------------------------------- webhook


@pytest.mark.parametrize("variant", [v for v in VARIANTS if webhook_enabled(v)])
def test_webhook_configurations(variant):
    objs = objects(variant)
    values = merged_values(variant)["webhook"]
    assert len(of_kind(objs, "MutatingWebhookConfiguration")) == 1
    assert len(of_kind(objs, "ValidatingWebhookConfiguration")) == 1
    svc = one(objs, "Service", "svcplane-webhook")
    assert svc["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "webhook", "protocol": "TCP"}]
    ports = {p["name"]: p["containerPort"] for p in container(objs)["ports"]}
    assert ports["webhook"] == values["port"] == int(flags(objs)["webhook-bind-address"].rsplit(":", 1)[1])
    entries = webhook_entries(objs)
    assert len(entries) == 2
    for kind, w in entries:
        assert w["admissionReviewVersions"] == ["v1"]
        assert w["sideEffects"] == "NoneOnDryRun"
        assert w["matchPolicy"] == "Equivalent"
        assert w["timeoutSeconds"] == values["timeoutSeconds"]
        assert 1 <= w["timeoutSeconds"] <= 30
        assert w["timeoutSeconds"] > seconds(flags(objs)["webhook-request-timeout"])
        assert w["failurePolicy"] == values["failurePolicy"]
        assert w["sideEffects"] == "NoneOnDryRun", "the install check's dry runs must be allowed"
        assert w["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                               "resources": ["services"], "scope": "Namespaced"}]
        path = "/mutate-services" if kind.startswith("Mutating") else "/validate-services"
        assert w["clientConfig"]["service"] == {"name": "svcplane-webhook", "namespace": NAMESPACE,
                                                "path": path, "port": 443}
        if kind.startswith("Mutating"):
            assert w["reinvocationPolicy"] == "Never", "the webhook must not be reinvoked"
        else:
            assert "reinvocationPolicy" not in w


def test_default_failure_policy_is_ignore_and_fail_is_the_generic_variants_choice():
    assert {w["failurePolicy"] for _, w in webhook_entries(objects("default"))} == {"Ignore"}
    generic = [v for v in CI_VARIANTS if merged_values(v)["webhook"]["excludeNamespaces"] == []]
    assert generic and all(merged_values(v)["webhook"]["failurePolicy"] == "Fail" for v in generic)


def expected_namespace_selector(values: dict, release_namespace: str) -> dict:
    by_name = [n for n in values["webhook"]["excludeNamespaces"] if n != release_namespace]
    exprs = []
    if by_name:
        exprs.append({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": by_name})
    if values["webhook"]["namespaceOptOutLabel"]:
        exprs.append({"key": values["webhook"]["namespaceOptOutLabel"], "operator": "DoesNotExist"})
    # NotIn with no values is refused by the API server: no expressions, an empty selector.
    return {"matchExpressions": exprs} if exprs else {}


@pytest.mark.parametrize("variant", [v for v in VARIANTS if webhook_enabled(v)])
def test_webhook_namespace_selector(variant):
    want = expected_namespace_selector(merged_values(variant), NAMESPACE)
    for _, w in webhook_entries(objects(variant)):
        assert w["namespaceSelector"] == want


def test_namespace_opt_out_label_and_kube_system_outside_the_release_namespace():
    for _, w in webhook_entries(objects("default")):
        assert w["namespaceSelector"] == {"matchExpressions": [
            {"key": "svcplane.io/ignore", "operator": "DoesNotExist"}]}, "kube-system is the release namespace"
    # Installed elsewhere: kube-system by name, the release namespace by matchCondition.
    objs = render_objects({}, namespace="svcplane-system")
    for _, w in webhook_entries(objs):
        assert w["namespaceSelector"]["matchExpressions"] == [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]},
            {"key": "svcplane.io/ignore", "operator": "DoesNotExist"}]
        assert 'request.namespace != "svcplane-system"' in w["matchConditions"][0]["expression"]
    objs = render_objects({"webhook": {"namespaceOptOutLabel": "", "excludeNamespaces": []}})
    for _, w in webhook_entries(objs):
        assert w["namespaceSelector"] == {}
    assert any(merged_values(v)["webhook"]["namespaceOptOutLabel"] != "svcplane.io/ignore" for v in CI_VARIANTS)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if webhook_enabled(v)])
def test_webhook_never_reviews_the_release_namespace_except_install_probes(variant):
    expected = ('request.namespace != "kube-system" || '
                '(has(object.metadata.labels) && "svcplane.io/probe" in object.metadata.labels)')
    for _, w in webhook_entries(objects(variant)):
        assert w["matchConditions"] == [{"name": "exclude-release-namespace", "expression": expected}]
    # Both chart Services live in the release namespace, so neither is ever reviewed.
    for svc in of_kind(objects(variant), "Service"):
        assert svc["metadata"]["namespace"] == NAMESPACE
        assert "svcplane.io/probe" not in svc["metadata"].get("labels", {})


@pytest.mark.parametrize("variant", [v for v in VARIANTS if webhook_enabled(v)])
def test_webhook_annotations(variant):
    values = merged_values(variant)["webhook"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        ann = one(objects(variant), kind)["metadata"].get("annotations", {})
        extra = {k: v for k, v in ann.items() if k != "cert-manager.io/inject-ca-from"}
        assert extra == values["annotations"]
    assert any(merged_values(v)["webhook"]["annotations"] for v in CI_VARIANTS)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if webhook_enabled(v)])
def test_webhook_opt_out_label(variant):
    label = merged_values(variant)["webhook"]["optOutLabel"]
    for _, w in webhook_entries(objects(variant)):
        if label:
            assert w["objectSelector"] == {"matchExpressions": [{"key": label, "operator": "DoesNotExist"}]}
        else:
            assert w["objectSelector"] == {}


@pytest.mark.parametrize("variant", [v for v in VARIANTS if webhook_enabled(v) and cert_mode(v) != "self"])
def test_webhook_flags_and_read_only_cert_volume(variant):
    objs = objects(variant)
    f = flags(objs)
    assert f["webhook"] == "true"
    c = container(objs)
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "webhook-tls"]
    assert mount["readOnly"] is True
    assert f["tls-cert-file"] == mount["mountPath"] + "/tls.crt"
    assert f["tls-private-key-file"] == mount["mountPath"] + "/tls.key"
    (vol,) = [v for v in deployment(objs)["spec"]["template"]["spec"]["volumes"] if v["name"] == "webhook-tls"]
    assert vol["name"] == mount["name"] and "secret" in vol
    assert not {k for k in f if k in ("tls-secret-name", "webhook-configuration-name")}


@pytest.mark.parametrize("variant", [v for v in VARIANTS if not webhook_enabled(v)])
def test_webhook_disabled(variant):
    objs = objects(variant)
    kinds = {o["kind"] for o in objs}
    assert not kinds & {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "Secret",
                        "Issuer", "Certificate", "Job", "Pod"}, kinds
    assert not [o for o in objs if o["metadata"]["name"] == "svcplane-check"], "no check without a webhook"
    assert not [s for s in of_kind(objs, "Service") if s["metadata"]["name"] == "svcplane-webhook"]
    f = flags(objs)
    assert f["webhook"] == "false"
    assert not {k for k in f if k.startswith("tls-") or k.startswith("webhook-") or k.startswith("claim-")}
    c = container(objs)
    secure = merged_values(variant)["metrics"]["secure"]["enabled"]
    assert [p["name"] for p in c["ports"]] == (["admin", "https-metrics"] if secure else ["admin"])
    assert "volumeMounts" not in c
    assert "volumes" not in deployment(objs)["spec"]["template"]["spec"]


def test_there_is_a_webhook_disabled_variant():
    assert [v for v in CI_VARIANTS if not webhook_enabled(v)]


# ------------------------------------------------------------ certificates


def secret_name(objs: list[dict]) -> str:
    (vol,) = [v for v in deployment(objs)["spec"]["template"]["spec"]["volumes"] if v["name"] == "webhook-tls"]
    return vol["secret"]["secretName"]


def variants_with_cert_mode(mode: str) -> list[str]:
    found = [v for v in VARIANTS if cert_mode(v) == mode]
    assert found, f"no variant renders certMode={mode}"
    return found


def _openssl(*args: str, stdin: bytes | None = None) -> str:
    return subprocess.run(["openssl", *args], input=stdin, capture_output=True, check=True).stdout.decode()


@pytest.mark.parametrize("variant", variants_with_cert_mode("self"))
def test_cert_mode_self(variant):
    """svcplane makes and rotates its own CA: nothing certificate-related is rendered,
    so a GitOps re-render changes nothing; the pods get exactly the access it needs."""
    objs = objects(variant)
    values = merged_values(variant)["webhook"]
    assert not of_kind(objs, "Secret") and not of_kind(objs, "Issuer") and not of_kind(objs, "Certificate")
    for _, w in webhook_entries(objs):
        assert "caBundle" not in w["clientConfig"], "published by the pods"
    f = flags(objs)
    assert f["tls-secret-name"] == "svcplane-webhook-certs"
    assert f["tls-secret-namespace"] == NAMESPACE
    assert f["webhook-service-name"] == one(objs, "Service", "svcplane-webhook")["metadata"]["name"]
    assert f["webhook-configuration-name"] == one(objs, "MutatingWebhookConfiguration")["metadata"]["name"] \
        == one(objs, "ValidatingWebhookConfiguration")["metadata"]["name"]
    assert f["tls-ca-validity"] == values["self"]["caValidity"]
    assert f["tls-cert-validity"] == values["self"]["certValidity"]
    assert "tls-cert-file" not in f and "tls-private-key-file" not in f
    assert "volumeMounts" not in container(objs) or not [
        m for m in container(objs)["volumeMounts"] if m["name"] == "webhook-tls"]
    role = one(objs, "Role", "svcplane-webhook-certs")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["svcplane-webhook-certs"],
         "verbs": ["get", "update"]}]
    binding = one(objs, "RoleBinding", "svcplane-webhook-certs")
    assert binding["subjects"][0]["name"] == one(objs, "ServiceAccount", "svcplane")["metadata"]["name"]


def test_only_self_mode_touches_secrets_or_webhook_configurations():
    for v in VARIANTS:
        objs = objects(v)
        roles = [o["metadata"]["name"] for o in of_kind(objs, "Role")]
        assert ("svcplane-webhook-certs" in roles) == (cert_mode(v) == "self"), v


@pytest.mark.parametrize("variant", variants_with_cert_mode("helm"))
def test_cert_mode_helm(variant, tmp_path):
    objs = objects(variant)
    assert not of_kind(objs, "Issuer") and not of_kind(objs, "Certificate")
    secret = one(objs, "Secret")
    assert secret["metadata"]["name"] == secret_name(objs) == "svcplane-webhook-tls"
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    for _, w in webhook_entries(objs):
        assert w["clientConfig"]["caBundle"] == secret["data"]["ca.crt"], "caBundle must come from the same CA"
    for cfg in of_kind(objs, "MutatingWebhookConfiguration") + of_kind(objs, "ValidatingWebhookConfiguration"):
        assert "cert-manager.io/inject-ca-from" not in cfg["metadata"].get("annotations", {})
    pem = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert pem["tls.crt"].startswith(b"-----BEGIN CERTIFICATE-----")
    assert b"PRIVATE KEY-----" in pem["tls.key"]
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed: SANs and signature not checked")
    for name, data in pem.items():
        (tmp_path / name).write_bytes(data)
    sans = _openssl("x509", "-noout", "-ext", "subjectAltName", "-in", str(tmp_path / "tls.crt"))
    assert "DNS:svcplane-webhook.kube-system.svc" in sans
    assert "DNS:svcplane-webhook.kube-system.svc.cluster.local" in sans
    assert "OK" in _openssl("verify", "-CAfile", str(tmp_path / "ca.crt"), str(tmp_path / "tls.crt"))


@pytest.mark.parametrize("variant", variants_with_cert_mode("cert-manager"))
def test_cert_mode_cert_manager(variant):
    objs = objects(variant)
    assert not of_kind(objs, "Secret"), "cert-manager writes the Secret"
    issuers = {i["metadata"]["name"]: i for i in of_kind(objs, "Issuer")}
    certs = {c["metadata"]["name"]: c for c in of_kind(objs, "Certificate")}
    assert issuers["svcplane-selfsigned"]["spec"] == {"selfSigned": {}}
    ca = certs["svcplane-ca"]["spec"]
    assert ca["isCA"] is True and ca["issuerRef"]["name"] == "svcplane-selfsigned"
    assert issuers["svcplane-ca"]["spec"] == {"ca": {"secretName": ca["secretName"]}}
    serving = certs["svcplane-webhook"]["spec"]
    assert serving["issuerRef"] == {"group": "cert-manager.io", "kind": "Issuer", "name": "svcplane-ca"}
    assert serving["dnsNames"] == ["svcplane-webhook.kube-system.svc",
                                   "svcplane-webhook.kube-system.svc.cluster.local"]
    assert serving["secretName"] == secret_name(objs)
    assert "server auth" in serving["usages"]
    for cfg in of_kind(objs, "MutatingWebhookConfiguration") + of_kind(objs, "ValidatingWebhookConfiguration"):
        assert cfg["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "kube-system/svcplane-webhook"
    for _, w in webhook_entries(objs):
        assert "caBundle" not in w["clientConfig"], "cainjector fills the caBundle"
    for o in of_kind(objs, "Issuer") + of_kind(objs, "Certificate"):
        assert o["apiVersion"] == "cert-manager.io/v1"


@pytest.mark.parametrize("variant", variants_with_cert_mode("secret"))
def test_cert_mode_secret(variant):
    objs = objects(variant)
    values = merged_values(variant)["webhook"]
    assert not of_kind(objs, "Secret") and not of_kind(objs, "Issuer") and not of_kind(objs, "Certificate")
    assert secret_name(objs) == values["existingSecret"]
    for _, w in webhook_entries(objs):
        assert w["clientConfig"]["caBundle"] == values["caBundle"]
    assert base64.b64decode(values["caBundle"]).startswith(b"-----BEGIN CERTIFICATE-----")


def test_helm_cert_is_regenerated_offline_not_expected_stable():
    # `lookup` is empty offline (and under `helm template`, which GitOps tools run), so
    # every render makes a new CA: tests must not pin a certificate, and GitOps users
    # take certMode self. (On a live helm upgrade the existing Secret is reused.)
    helm_mode = {"webhook": {"certMode": "helm"}}
    a = one(render_objects(helm_mode), "Secret")["data"]["ca.crt"]
    b = one(render_objects(helm_mode), "Secret")["data"]["ca.crt"]
    assert a != b


# ------------------------------------------------------------ install check


def check_objects(objs: list[dict]) -> tuple[list[dict], list[dict]]:
    jobs = [o for o in of_kind(objs, "Job") if o["metadata"]["name"] == "svcplane-check"]
    pods = [o for o in of_kind(objs, "Pod") if o["metadata"]["name"] == "svcplane-check-test"]
    return jobs, pods


@pytest.mark.parametrize("variant", [v for v in VARIANTS if webhook_enabled(v)])
def test_install_check_hook_and_helm_test(variant):
    objs = objects(variant)
    values = merged_values(variant)
    jobs, pods = check_objects(objs)
    (pod,) = pods
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    # A passed `helm test` leaves no Completed Pod behind; a failed one stays for its logs.
    assert pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    if values["webhook"]["check"]["hook"]:
        (job,) = jobs
        ann = job["metadata"]["annotations"]
        # Checked after every change of the running release, rollbacks included.
        assert ann["helm.sh/hook"] == "post-install,post-upgrade,post-rollback"
        assert "hook-succeeded" in ann["helm.sh/hook-delete-policy"]
        assert "before-hook-creation" in ann["helm.sh/hook-delete-policy"]
        assert job["spec"]["backoffLimit"] == 0
        deadline = seconds(values["webhook"]["check"]["timeout"]) + 60
        assert job["spec"]["activeDeadlineSeconds"] == deadline
        if variant == "default":
            # A check that cannot start fails before Helm's default 5 min timeout.
            assert deadline < 300
        # A failed Job is kept for its logs, then goes; listed in the README.
        assert job["spec"]["ttlSecondsAfterFinished"] == 600
        specs = [job["spec"]["template"]["spec"], pod["spec"]]
    else:
        assert not jobs
        specs = [pod["spec"]]
    for spec in specs:
        assert spec["restartPolicy"] == "Never"
        assert spec["serviceAccountName"] == "svcplane-check"
        (c,) = spec["containers"]
        assert c["image"] == container(objs)["image"], "the same image as the pods it checks"
        selector = ",".join(f"{k}={v}" for k, v in deployment(objs)["spec"]["selector"]["matchLabels"].items())
        lease = [f"--leader-lease={flags(objs)['leader-elect-resource-name']}"] \
            if values["leaderElection"]["enabled"] else []
        assert c["args"] == ["check", f"--namespace={NAMESPACE}",
                             f"--timeout={values['webhook']['check']['timeout']}", "--interval=2s",
                             f"--pods-selector={selector}"] + lease
        assert c["securityContext"] == values["containerSecurityContext"]
        assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    role = one(objs, "Role", "svcplane-check")
    expected = [{"apiGroups": [""], "resources": ["services"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    if values["leaderElection"]["enabled"]:
        expected.append({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                         "resourceNames": [flags(objs)["leader-elect-resource-name"]], "verbs": ["get"]})
    assert role["rules"] == expected, \
        "a dry-run create needs the verb; Pods and the Lease are read, nothing else"
    binding = one(objs, "RoleBinding", "svcplane-check")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "svcplane-check", "namespace": NAMESPACE}]
    assert one(objs, "ServiceAccount", "svcplane-check")


@pytest.mark.parametrize("variant", [v for v in VARIANTS if webhook_enabled(v)])
def test_check_pods_are_never_endpoints_of_the_charts_services(variant):
    objs = objects(variant)
    jobs, pods = check_objects(objs)
    check_pod_labels = [j["spec"]["template"]["metadata"]["labels"] for j in jobs] + \
        [p["metadata"]["labels"] for p in pods]
    selectors = [s["spec"]["selector"] for s in of_kind(objs, "Service")]
    selectors += [p["spec"]["selector"]["matchLabels"] for p in of_kind(objs, "PodDisruptionBudget")]
    selectors += [deployment(objs)["spec"]["selector"]["matchLabels"]]
    for labels in check_pod_labels:
        assert labels["app.kubernetes.io/name"] == "svcplane-check"
        for sel in selectors:
            assert not all(labels.get(k) == v for k, v in sel.items()), f"{labels} matches {sel}"


def test_there_is_a_variant_without_the_hook():
    assert any(webhook_enabled(v) and not merged_values(v)["webhook"]["check"]["hook"] for v in CI_VARIANTS)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if webhook_enabled(v)])
def test_binary_parses_the_check_args(variant):
    """The hook's `svcplane check ...` gets past flag parsing (exit 1, not the usage error 2)."""
    binary = run_capable_binary()
    jobs, pods = check_objects(objects(variant))
    (c,) = pods[0]["spec"]["containers"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVCPLANE_") and k != "KUBECONFIG"}
    result = subprocess.run([str(binary), *c["args"], "--kubeconfig", "/nonexistent/svcplane-chart-test"],
                            capture_output=True, text=True, timeout=30, env=env)
    assert result.returncode == 1, f"exit {result.returncode}:\n{result.stderr}"
    assert "kubeconfig" in result.stderr, result.stderr


# -------------------------------------------------------- metrics, CRD, notes


@pytest.mark.parametrize("variant", VARIANTS)
def test_metrics_service_and_service_monitor(variant):
    objs = objects(variant)
    m = merged_values(variant)["metrics"]
    svcs = [s for s in of_kind(objs, "Service") if s["metadata"]["name"] == "svcplane-metrics"]
    want_svc = m["service"]["enabled"] or m["serviceMonitor"]["enabled"]
    assert len(svcs) == (1 if want_svc else 0)
    secure = m["secure"]["enabled"]
    if svcs:
        if secure:
            assert svcs[0]["spec"]["ports"] == [{"name": "https-metrics", "port": m["secure"]["port"],
                                                 "targetPort": "https-metrics", "protocol": "TCP"}]
        else:
            assert svcs[0]["spec"]["ports"] == [{"name": "metrics", "port": m["service"]["port"],
                                                 "targetPort": "admin", "protocol": "TCP"}]
    sms = of_kind(objs, "ServiceMonitor")
    assert len(sms) == (1 if m["serviceMonitor"]["enabled"] else 0)
    for sm in sms:
        assert sm["apiVersion"] == "monitoring.coreos.com/v1"
        (ep,) = sm["spec"]["endpoints"]
        assert ep["port"] == svcs[0]["spec"]["ports"][0]["name"]
        assert ep["path"] == "/metrics"
        assert ep["scheme"] == ("https" if secure else "http")
        labels = svcs[0]["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
        assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        for k, v in m["serviceMonitor"]["labels"].items():
            assert sm["metadata"]["labels"][k] == v


def test_there_is_a_service_monitor_variant():
    assert any(merged_values(v)["metrics"]["serviceMonitor"]["enabled"] for v in CI_VARIANTS)


# ------------------------------------------------------ secure metrics port

SECURE_RULES = [{"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
                {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}]
READER_RULES = [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def validate_strictly(objs: list[dict]) -> None:
    for o in objs:
        for kube in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(o, kube, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                assert (o["apiVersion"], o["kind"]) in FOREIGN_KINDS, o["kind"]


def named(objs: list[dict], kind: str, name: str) -> list[dict]:
    return [o for o in of_kind(objs, kind) if o["metadata"]["name"] == name]


def test_secure_metrics_port_is_the_default():
    objs = objects("default")
    f = flags(objs)
    assert f["secure-metrics-bind-address"] == "0.0.0.0:10257"
    assert f["metrics-bind-address"] == "0.0.0.0:8080", "the plain port stays, for the probes"
    c = container(objs)
    ports = {p["name"]: p for p in c["ports"]}
    assert ports["https-metrics"] == {"name": "https-metrics", "containerPort": 10257, "protocol": "TCP"}
    assert c["livenessProbe"]["httpGet"]["port"] == c["readinessProbe"]["httpGet"]["port"] == "admin"
    # svcplane checks each scraper's token: TokenReview, then SubjectAccessReview.
    own = one(objs, "ClusterRole", "svcplane")["rules"]
    assert all(r in own for r in SECURE_RULES), own
    assert one(objs, "ClusterRole", "svcplane-metrics-reader")["rules"] == READER_RULES
    assert not named(objs, "ClusterRoleBinding", "svcplane-metrics-reader"), "no readers: no binding"
    svc = one(objs, "Service", "svcplane-metrics")
    assert svc["spec"]["ports"] == [{"name": "https-metrics", "port": 10257, "targetPort": "https-metrics",
                                     "protocol": "TCP"}]
    assert "metrics-tls" not in {v["name"] for v in deployment(objs)["spec"]["template"]["spec"].get("volumes", [])}


def test_secure_metrics_readers_are_bound_to_the_reader_role():
    readers = [{"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"},
               {"kind": "Group", "name": "system:monitoring"},
               {"kind": "User", "name": "scraper@example.com", "apiGroup": "rbac.authorization.k8s.io"}]
    objs = render_objects({"metrics": {"secure": {"readers": readers}}})
    validate_strictly(objs)
    binding = one(objs, "ClusterRoleBinding", "svcplane-metrics-reader")
    assert "namespace" not in binding["metadata"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "svcplane-metrics-reader"}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"},
        {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:monitoring"},
        {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "scraper@example.com"}]
    assert one(objs, "ClusterRole", "svcplane-metrics-reader")["rules"] == READER_RULES
    # the observability variant binds its Prometheus the same way
    assert one(objects("observability-values.yaml"), "ClusterRoleBinding", "svcplane-metrics-reader")["subjects"] \
        == merged_values("observability-values.yaml")["metrics"]["secure"]["readers"]


def test_secure_metrics_readers_need_the_reader_role():
    readers = [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]
    for values in ({"metrics": {"secure": {"readers": readers, "readerClusterRole": False}}},
                   {"metrics": {"secure": {"readers": readers}}, "rbac": {"create": False}}):
        with pytest.raises(chart_render.ChartError, match="metrics.secure.readers"):
            render_objects(values)
    # Without the role (bind your scrapers yourself): the token checks are still granted.
    objs = render_objects({"metrics": {"secure": {"readerClusterRole": False}}})
    assert not named(objs, "ClusterRole", "svcplane-metrics-reader")
    assert not named(objs, "ClusterRoleBinding", "svcplane-metrics-reader")
    assert all(r in one(objs, "ClusterRole", "svcplane")["rules"] for r in SECURE_RULES)


def test_secure_metrics_disabled_is_plain_http_on_admin():
    readers = [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]
    objs = render_objects({"metrics": {"secure": {"enabled": False, "certSecret": "unused", "readers": readers},
                                       "serviceMonitor": {"enabled": True}},
                           "networkPolicy": {"enabled": True}})
    validate_strictly(objs)
    f = flags(objs)
    assert not {k for k in f if k.startswith("secure-metrics") or k.startswith("metrics-tls")}, f
    c = container(objs)
    assert [p["name"] for p in c["ports"]] == ["admin", "webhook"]
    assert "metrics-tls" not in {m["name"] for m in c.get("volumeMounts", [])}
    own = grants(one(objs, "ClusterRole", "svcplane")["rules"])
    assert not {x for x in own if x[1] in ("tokenreviews", "subjectaccessreviews")}
    assert not named(objs, "ClusterRole", "svcplane-metrics-reader")
    assert not named(objs, "ClusterRoleBinding", "svcplane-metrics-reader")
    svc = one(objs, "Service", "svcplane-metrics")
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 8080, "targetPort": "admin", "protocol": "TCP"}]
    (ep,) = one(objs, "ServiceMonitor")["spec"]["endpoints"]
    assert ep == {"port": "metrics", "path": "/metrics", "scheme": "http", "interval": "30s", "scrapeTimeout": "10s"}
    rules_ = one(objs, "NetworkPolicy")["spec"]["ingress"]
    assert [p["port"] for r in rules_ for p in r["ports"]] == ["webhook", "admin"]
    notes: dict = {}
    render_objects({"metrics": {"secure": {"enabled": False}}}, notes)
    assert "http://svcplane-metrics.kube-system.svc:8080/metrics" in notes["text"]


@pytest.mark.parametrize("webhook", [
    {},  # certMode self: nothing of the webhook's is mounted
    {"certMode": "secret", "existingSecret": "svcplane-serving-cert", "caBundle": "Zm9v"},
    {"enabled": False},
])
def test_secure_metrics_cert_secret_is_mounted(webhook):
    objs = render_objects({"metrics": {"secure": {"certSecret": "svcplane-metrics-cert"}}, "webhook": webhook})
    validate_strictly(objs)
    f = flags(objs)
    c = container(objs)
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "metrics-tls"]
    assert mount == {"name": "metrics-tls", "mountPath": "/etc/svcplane/metrics-tls", "readOnly": True}
    assert f["metrics-tls-cert-file"] == "/etc/svcplane/metrics-tls/tls.crt"
    assert f["metrics-tls-private-key-file"] == "/etc/svcplane/metrics-tls/tls.key"
    vols = {v["name"]: v for v in deployment(objs)["spec"]["template"]["spec"]["volumes"]}
    assert vols["metrics-tls"] == {"name": "metrics-tls",
                                   "secret": {"secretName": "svcplane-metrics-cert", "defaultMode": 0o440}}
    # the webhook's own certificate volume is untouched
    mounted_webhook = webhook.get("certMode") == "secret"
    assert ("webhook-tls" in vols) == mounted_webhook
    assert ("webhook-tls" in {m["name"] for m in c["volumeMounts"]}) == mounted_webhook
    if mounted_webhook:
        assert vols["webhook-tls"]["secret"]["secretName"] == "svcplane-serving-cert"
        assert f["tls-cert-file"] == "/etc/svcplane/tls/tls.crt"


def test_there_is_a_cert_secret_variant():
    assert any(merged_values(v)["metrics"]["secure"]["certSecret"] for v in CI_VARIANTS)
    assert any(not merged_values(v)["metrics"]["secure"]["enabled"] for v in CI_VARIANTS)


def test_service_monitor_scrapes_the_secure_port_with_its_token():
    objs = render_objects({"metrics": {"serviceMonitor": {"enabled": True}}})
    (ep,) = one(objs, "ServiceMonitor")["spec"]["endpoints"]
    assert ep == {"port": "https-metrics", "path": "/metrics", "scheme": "https", "bearerTokenFile": TOKEN_FILE,
                  "tlsConfig": {"insecureSkipVerify": True}, "interval": "30s", "scrapeTimeout": "10s"}
    svc = one(objs, "Service", "svcplane-metrics")
    assert [p["name"] for p in svc["spec"]["ports"]] == ["https-metrics"]


def test_network_policy_opens_the_secure_metrics_port():
    peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    objs = render_objects({"networkPolicy": {"enabled": True, "metricsFrom": peers}})
    validate_strictly(objs)
    ingress = one(objs, "NetworkPolicy")["spec"]["ingress"]
    (metrics_rule,) = [r for r in ingress if any(p["port"] == "https-metrics" for p in r["ports"])]
    assert metrics_rule["ports"] == [{"port": "admin", "protocol": "TCP"}, {"port": "https-metrics", "protocol": "TCP"}]
    assert metrics_rule["from"] == peers
    # every named port the policy opens exists on the container
    names = {p["name"] for p in container(objs)["ports"]}
    assert {p["port"] for r in ingress for p in r["ports"]} <= names


def test_secure_metrics_port_must_not_clash():
    with pytest.raises(chart_render.ChartError, match="metrics.secure.port must differ from metrics.port"):
        render_objects({"metrics": {"port": 10257}})
    with pytest.raises(chart_render.ChartError, match="metrics.secure.port must differ from webhook.port"):
        render_objects({"metrics": {"secure": {"port": 9443}}})
    # no clash when the port it would clash with is off
    render_objects({"metrics": {"secure": {"port": 9443}}, "webhook": {"enabled": False}})
    render_objects({"metrics": {"port": 10257, "secure": {"enabled": False}}})


@pytest.mark.parametrize("variant", VARIANTS)
def test_notes_say_where_metrics_are(variant):
    _, notes = _rendered(variant)
    m = merged_values(variant)["metrics"]
    if not m["secure"]["enabled"]:
        assert "/metrics" in notes and "https" not in notes.split("Metrics:")[1]
        return
    assert "https" in notes.split("Metrics:")[1]
    assert f"Port {m['port']} (admin) serves only /livez and /readyz" in notes
    if m["service"]["enabled"] or m["serviceMonitor"]["enabled"]:
        assert f"https://svcplane-metrics.kube-system.svc:{m['secure']['port']}/metrics" in notes


def test_crd_matches_the_shipped_file_and_is_kept():
    crd = one(objects("default"), "CustomResourceDefinition")
    shipped = yaml.safe_load((CHART / "files" / "allocationclaims.svcplane.io.yaml").read_text())
    assert crd["spec"] == shipped["spec"]
    assert crd["metadata"]["name"] == "allocationclaims.svcplane.io"
    assert crd["spec"]["group"] == "svcplane.io" and crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["plural"] == "allocationclaims"
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha1"]
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert not of_kind(render_objects({"crds": {"install": True, "keep": False}}), "CustomResourceDefinition")[0][
        "metadata"].get("annotations")
    assert not of_kind(render_objects({"crds": {"install": False, "keep": True}}), "CustomResourceDefinition")


def test_crd_is_what_the_binary_prints():
    """The shipped CRD equals `svcplane crd` (skipped until a binary exists)."""
    binary = svcplane_binary()
    if binary is None:
        pytest.skip("no target/*/svcplane binary; regenerate with `cargo run -q -p svcplane-controller -- crd`")
    out = subprocess.run([str(binary), "crd"], capture_output=True, check=True, timeout=60).stdout
    shipped = yaml.safe_load((CHART / "files" / "allocationclaims.svcplane.io.yaml").read_text())
    assert yaml.safe_load(out) == shipped, (
        "charts/svcplane/files/allocationclaims.svcplane.io.yaml is stale: "
        "cargo run -q -p svcplane-controller -- crd > charts/svcplane/files/allocationclaims.svcplane.io.yaml")


def svcplane_binary() -> pathlib.Path | None:
    """$SVCPLANE_BIN, else target/debug/svcplane, else target/release/svcplane."""
    if os.environ.get("SVCPLANE_BIN"):
        return pathlib.Path(os.environ["SVCPLANE_BIN"])
    for b in (REPO / "target" / "debug" / "svcplane", REPO / "target" / "release" / "svcplane"):
        if b.exists():
            return b
    return None


def run_capable_binary() -> pathlib.Path:
    binary = svcplane_binary()
    if binary is None:
        pytest.skip("no svcplane binary (set SVCPLANE_BIN or build target/debug/svcplane)")
    result = subprocess.run([str(binary), "run", "--help"], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        pytest.skip(f"{binary} has no `run` subcommand yet (stale build?)")
    return binary


@pytest.mark.parametrize("variant", VARIANTS)
def test_binary_parses_the_rendered_args(variant):
    """`svcplane run <rendered args>` gets past flag parsing (clap exits 2 on a usage error).

    --kubeconfig points nowhere, so the run stops right after parsing without
    touching a cluster."""
    binary = run_capable_binary()
    args = container(objects(variant))["args"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVCPLANE_") and k != "KUBECONFIG"}
    env.update(POD_NAME="svcplane-test", POD_NAMESPACE=NAMESPACE)
    try:
        result = subprocess.run([str(binary), *args, "--kubeconfig", "/nonexistent/svcplane-chart-test"],
                                capture_output=True, text=True, timeout=20, env=env)
    except subprocess.TimeoutExpired:
        return  # still running: the flags parsed
    assert result.returncode != 2, f"svcplane refused the chart's flags:\n{result.stderr}"
    assert "kubeconfig" in result.stderr, result.stderr


@pytest.mark.parametrize("variant", VARIANTS)
def test_binary_knows_every_flag_the_chart_passes(variant):
    """Every rendered flag is one `svcplane run --help` lists (skipped without a binary that has `run`)."""
    binary = run_capable_binary()
    result = subprocess.run([str(binary), "run", "--help"], capture_output=True, text=True, timeout=60)
    known = set(re.findall(r"--([a-z0-9-]+)", result.stdout))
    extra = {re.match(r"--([a-z0-9-]+)", a).group(1) for a in merged_values(variant)["extraArgs"]}
    unknown = [f for f in flags(objects(variant)) if f not in known and f not in extra]
    assert not unknown, f"flags the chart passes but `svcplane run` does not have: {unknown}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_notes_tell_how_to_disable_kcm_controllers(variant):
    _, notes = _rendered(variant)
    assert KCM_FLAG in notes
    assert "rollout status deployment/svcplane" in notes


@pytest.mark.parametrize("variant", [v for v in VARIANTS if webhook_enabled(v)])
def test_notes_give_the_emergency_switch_and_the_check(variant):
    _, notes = _rendered(variant)
    assert "kubectl delete mutatingwebhookconfiguration,validatingwebhookconfiguration svcplane" in notes
    assert "helm test svcplane -n kube-system" in notes
    policy = merged_values(variant)["webhook"]["failurePolicy"]
    assert ("REFUSED" in notes) == (policy == "Fail")


# ------------------------------------------------------ values -> flags map


def test_every_value_reaches_its_flag():
    values = {
        "controllers": ["*", "-allocator-repair"],
        "endpointSlice": {"maxEndpointsPerSlice": 250, "updatesBatchPeriod": "2s", "concurrentSyncs": 7},
        "endpoints": {"updatesBatchPeriod": "1s", "concurrentSyncs": 8},
        "mirroring": {"maxEndpointsPerSubset": 500, "updatesBatchPeriod": "3s", "concurrentSyncs": 9},
        "serviceClusterIPRange": "10.0.0.0/16,fd00::/108",
        "serviceRangesFrom": "flags",
        "serviceNodePortRange": "31000-31999",
        "allocatorRepairInterval": "5m",
        "kubeAPI": {"qps": 50, "burst": 75},
        "leaderElection": {"enabled": True, "leaseDuration": "20s", "renewDeadline": "15s",
                           "retryPeriod": "3s", "resourceName": "my-lease"},
        "shutdownGracePeriod": "25s",
        "terminationGracePeriodSeconds": 40,
        "logging": {"format": "json", "level": "debug"},
        "listenHost": "[::]",
        "metrics": {"port": 9090},
        "webhook": {"port": 10443, "requestTimeout": "3s", "tlsReloadInterval": "1m",
                    "claimGracePeriod": "90s", "claimRepairInterval": "45s",
                    "self": {"caValidity": "43800h", "certValidity": "720h"}},
        "extraArgs": ["--some-future-flag=1"],
    }
    objs = render_objects(values)
    f = flags(objs)
    assert f == {
        "controllers": "*,-allocator-repair",
        "max-endpoints-per-slice": "250",
        "mirroring-max-endpoints-per-subset": "500",
        "endpoint-updates-batch-period": "1s",
        "endpointslice-updates-batch-period": "2s",
        "mirroring-endpointslice-updates-batch-period": "3s",
        "concurrent-service-endpoint-syncs": "7",
        "concurrent-endpoint-syncs": "8",
        "mirroring-concurrent-service-endpoint-syncs": "9",
        "service-cluster-ip-range": "10.0.0.0/16,fd00::/108",
        "service-ranges-from": "flags",
        "service-node-port-range": "31000-31999",
        "allocator-repair-interval": "5m",
        "kube-api-qps": "50",
        "kube-api-burst": "75",
        "metrics-bind-address": "[::]:9090",
        "secure-metrics-bind-address": "[::]:10257",
        "leader-elect": "true",
        "leader-elect-lease-duration": "20s",
        "leader-elect-renew-deadline": "15s",
        "leader-elect-retry-period": "3s",
        "leader-elect-resource-name": "my-lease",
        "leader-elect-resource-namespace": "kube-system",
        "shutdown-grace-period": "25s",
        "log-format": "json",
        "webhook": "true",
        "webhook-bind-address": "[::]:10443",
        "tls-secret-name": "svcplane-webhook-certs",
        "tls-secret-namespace": "kube-system",
        "webhook-service-name": "svcplane-webhook",
        "webhook-configuration-name": "svcplane",
        "tls-ca-validity": "43800h",
        "tls-cert-validity": "720h",
        "tls-reload-interval": "1m",
        "webhook-request-timeout": "3s",
        "claim-grace-period": "90s",
        "claim-repair-interval": "45s",
        "some-future-flag": "1",
    }
    assert "kubeconfig" not in f, "in-cluster config: the chart never passes --kubeconfig"
    assert one(objs, "Role", "svcplane-leader-election")["rules"][1]["resourceNames"] == ["my-lease"]
    ports = {p["name"]: p["containerPort"] for p in container(objs)["ports"]}
    assert ports == {"admin": 9090, "https-metrics": 10257, "webhook": 10443}


def test_default_flags_equal_the_binary_defaults():
    f = flags(objects("default"))
    assert f["controllers"] == "endpointslice,endpoints,endpointslicemirroring,allocator-repair"
    assert f["max-endpoints-per-slice"] == "100"
    assert f["mirroring-max-endpoints-per-subset"] == "1000"
    assert f["endpoint-updates-batch-period"] == "0s"
    assert "endpointslice-updates-batch-period" not in f  # defaults to the endpoints period
    assert "mirroring-endpointslice-updates-batch-period" not in f
    # The ranges come from the cluster's ServiceCIDR objects: nothing copied by hand.
    assert "service-cluster-ip-range" not in f
    assert f["service-ranges-from"] == "cluster"
    assert f["service-node-port-range"] == "30000-32767"
    assert (f["kube-api-qps"], f["kube-api-burst"]) == ("20", "30")
    assert f["metrics-bind-address"] == "0.0.0.0:8080"
    assert f["secure-metrics-bind-address"] == "0.0.0.0:10257"
    assert "metrics-tls-cert-file" not in f and "metrics-tls-private-key-file" not in f
    assert f["webhook-bind-address"] == "0.0.0.0:9443"
    assert f["log-format"] == "text"
    assert f["shutdown-grace-period"] == "20s"


# ------------------------------------------------------------- bad values


def schema_error(values: dict) -> str:
    with helm.Chart.load(str(CHART)) as chart:
        with pytest.raises(helm.HelmError) as e:
            chart.validate_schema(values)
    return str(e.value)


def test_bad_values_file_fails_naming_the_field():
    bad = HERE / "bad-values.yaml"
    # Kept outside the chart's ci/ directory, so no variant loop picks it up.
    assert (CHART / "ci").resolve() not in bad.resolve().parents
    with pytest.raises(chart_render.ChartError) as e:
        chart_render.render(str(CHART), str(bad))
    assert "/webhook/failurePolicy" in str(e.value)
    assert "/webhook/failurePolicy" in schema_error(chart_render.load_values(str(bad)))
    result = subprocess.run([sys.executable, str(HERE / "render.py"), str(CHART), "/dev/null", str(bad)],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "/webhook/failurePolicy" in result.stderr


@pytest.mark.parametrize("values,pointer", [
    ({"replicaCount": 0}, "/replicaCount"),
    ({"webhook": {"timeoutSeconds": 31}}, "/webhook/timeoutSeconds"),
    ({"webhook": {"timeoutSeconds": 0}}, "/webhook/timeoutSeconds"),
    ({"webhook": {"certMode": "self-signed"}}, "/webhook/certMode"),
    ({"webhook": {"self": {"caValidity": "0s"}}}, "/webhook/self/caValidity"),
    ({"webhook": {"check": {"timeout": "500ms"}}}, "/webhook/check/timeout"),
    ({"webhook": {"namespaceOptOutLabel": "not a label"}}, "/webhook/namespaceOptOutLabel"),
    ({"webhook": {"annotations": {"a": 1}}}, "/webhook/annotations/a"),
    ({"logging": {"verbosity": 11}}, "/logging/verbosity"),
    ({"hostNetwork": "yes"}, "/hostNetwork"),
    ({"affinity": {"nodeAfinity": {}}}, "/affinity"),
    ({"podSecurityContext": {"runAsUser": -1}}, "/podSecurityContext/runAsUser"),
    ({"containerSecurityContext": {"privilegd": True}}, "/containerSecurityContext"),
    ({"updateStrategy": {"type": "OnDelete"}}, "/updateStrategy/type"),
    ({"revisionHistoryLimit": -1}, "/revisionHistoryLimit"),
    ({"extraVolumes": [1]}, "/extraVolumes/0"),
    ({"networkPolicy": {"enabled": True, "egress": {}}}, "/networkPolicy/egress"),
    ({"leaderElection": {"leaseDuration": "-15s"}}, "/leaderElection/leaseDuration"),
    ({"webhook": {"certMode": "secret"}}, "/webhook/existingSecret"),
    ({"webhook": {"typo": 1}}, "/webhook"),
    ({"replicas": 2}, "replicas"),
    ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ({"logging": {"format": "yaml"}}, "/logging/format"),
    ({"endpointSlice": {"maxEndpointsPerSlice": 1001}}, "/endpointSlice/maxEndpointsPerSlice"),
    ({"mirroring": {"maxEndpointsPerSubset": 0}}, "/mirroring/maxEndpointsPerSubset"),
    ({"endpoints": {"concurrentSyncs": 51}}, "/endpoints/concurrentSyncs"),
    ({"kubeAPI": {"qps": -1}}, "/kubeAPI/qps"),
    ({"kubeAPI": {"burst": 0}}, "/kubeAPI/burst"),
    ({"allocatorRepairInterval": "0s"}, "/allocatorRepairInterval"),
    ({"leaderElection": {"retryPeriod": "0m0s"}}, "/leaderElection/retryPeriod"),
    ({"webhook": {"requestTimeout": "0ms"}}, "/webhook/requestTimeout"),
    ({"listenHost": "localhost"}, "/listenHost"),
    ({"endpoints": {"updatesBatchPeriod": "1"}}, "/endpoints/updatesBatchPeriod"),
    ({"leaderElection": {"leaseDuration": "15 seconds"}}, "/leaderElection/leaseDuration"),
    ({"controllers": ["endpointslices"]}, "/controllers/0"),
    ({"resources": {"limits": {"memory": "256Mi", "cpu": "1"}}}, "/resources/limits"),
    ({"serviceClusterIPRange": "10.96.0.0"}, "/serviceClusterIPRange"),
    ({"webhook": {"excludeNamespaces": ["Kube_System"]}}, "/webhook/excludeNamespaces/0"),
    ({"metrics": {"secure": {"port": 0}}}, "/metrics/secure/port"),
    ({"metrics": {"secure": {"port": 65536}}}, "/metrics/secure/port"),
    ({"metrics": {"secure": {"port": "10257"}}}, "/metrics/secure/port"),
    ({"metrics": {"secure": {"enabled": "yes"}}}, "/metrics/secure/enabled"),
    ({"metrics": {"secure": {"readerClusterRole": 1}}}, "/metrics/secure/readerClusterRole"),
    ({"metrics": {"secure": {"certSecret": "Metrics_TLS"}}}, "/metrics/secure/certSecret"),
    ({"metrics": {"secure": {"insecure": True}}}, "/metrics/secure"),
    ({"metrics": {"secure": {"readers": {"kind": "User", "name": "a"}}}}, "/metrics/secure/readers"),
    ({"metrics": {"secure": {"readers": [{"kind": "ServiceAccount", "name": "prometheus"}]}}},
     "/metrics/secure/readers/0"),
    ({"metrics": {"secure": {"readers": [{"kind": "Pod", "name": "a"}]}}}, "/metrics/secure/readers/0/kind"),
    ({"metrics": {"secure": {"readers": [{"kind": "User"}]}}}, "/metrics/secure/readers/0"),
    ({"metrics": {"secure": {"readers": [{"kind": "User", "name": ""}]}}}, "/metrics/secure/readers/0/name"),
    ({"metrics": {"secure": {"readers": [{"kind": "User", "name": "a", "apiGroup": ""}]}}},
     "/metrics/secure/readers/0/apiGroup"),
    ({"metrics": {"secure": {"readers": [{"kind": "ServiceAccount", "name": "a", "namespace": "m",
                                          "apiGroup": "rbac.authorization.k8s.io"}]}}},
     "/metrics/secure/readers/0/apiGroup"),
    ({"metrics": {"secure": {"readers": [{"kind": "User", "name": "a", "verbs": ["get"]}]}}},
     "/metrics/secure/readers/0"),
])
def test_schema_refuses(values, pointer):
    assert pointer in schema_error(values)


def test_defaults_and_ci_variants_pass_the_schema():
    with helm.Chart.load(str(CHART)) as chart:
        for v in VARIANTS:
            chart.validate_schema(variant_values(v))
        # accepted edge values
        for ok in ({"kubeAPI": {"qps": 0}}, {"kubeAPI": {"qps": 2.5}}, {"endpoints": {"updatesBatchPeriod": "0s"}},
                   {"allocatorRepairInterval": "1m30s"}, {"leaderElection": {"retryPeriod": "500ms"}},
                   {"controllers": ["*", "-endpoint"]}, {"shutdownGracePeriod": "0s"},
                   # Go durations, as kube-controller-manager takes them
                   {"leaderElection": {"retryPeriod": "1.5s"}}, {"endpoints": {"updatesBatchPeriod": "0"}},
                   {"allocatorRepairInterval": "1h2m3.5s"}, {"webhook": {"requestTimeout": "300us"}},
                   {"webhook": {"claimGracePeriod": "300µs"}},
                   # kube-controller-manager's controller names
                   {"controllers": ["endpointslice-controller", "-endpointslice-mirroring-controller",
                                    "endpoints-controller"]},
                   {"logging": {"verbosity": 0}}, {"logging": {"verbosity": None}},
                   {"webhook": {"certMode": "self"}}, {"webhook": {"check": {"timeout": "1m30s"}}},
                   {"metrics": {"secure": {"port": 1}}}, {"metrics": {"secure": {"port": 65535}}},
                   {"metrics": {"secure": {"enabled": False, "certSecret": "a.b-c", "readerClusterRole": False}}},
                   {"metrics": {"secure": {"readers": [
                       {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"},
                       {"kind": "ServiceAccount", "name": "p", "namespace": "m", "apiGroup": ""},
                       {"kind": "Group", "name": "system:monitoring"},
                       {"kind": "User", "name": "u", "apiGroup": "rbac.authorization.k8s.io"}]}}}):
            chart.validate_schema(ok)


def test_schema_is_strict_at_every_object_level():
    import json
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    loose = []

    def walk(node, where):
        if isinstance(node, dict):
            if node.get("type") == "object" and "additionalProperties" not in node:
                loose.append(where)
            for k, v in node.items():
                walk(v, f"{where}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}/{i}")

    walk(schema, "#")
    assert not loose, f"objects without additionalProperties: {loose}"


def test_leader_election_off_needs_a_single_replica():
    with pytest.raises(chart_render.ChartError, match="leaderElection.enabled=false"):
        render_objects({"leaderElection": {"enabled": False}})
    objs = render_objects({"leaderElection": {"enabled": False}, "replicaCount": 1,
                           "podDisruptionBudget": {"enabled": False}})
    assert flags(objs)["leader-elect"] == "false"
    assert deployment(objs)["spec"]["replicas"] == 1
    assert not of_kind(objs, "PodDisruptionBudget")


def test_readme_documents_every_value():
    readme = (CHART / "README.md").read_text()
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    # documented as whole objects
    opaque = {"resources", "nodeSelector", "podSecurityContext", "containerSecurityContext", "updateStrategy",
              "metrics.dashboard.labels"}

    def leaves(d, prefix=""):
        for k, v in d.items():
            key = prefix + k
            if isinstance(v, dict) and v and key not in opaque:
                yield from leaves(v, key + ".")
            else:
                yield key

    missing = [k for k in leaves(defaults) if f"| `{k}` |" not in readme]
    assert not missing, f"charts/svcplane/README.md values table lacks: {missing}"
