"""Offline checks of the chart's Grafana dashboard and PrometheusRule (issue 18).

- every PromQL expression (dashboard panels and variables, alert rules) parses
  (promql-parser, the Rust crate's Python binding, pinned in tests/chart/run.sh);
- every metric an expression names is one svcplane exports: the metrics table
  of docs/reference/metrics.md ("# Probes and metrics"); the rules may also name
  the kube-apiserver metrics docs/operate/runbooks.md lists in its
  "kube-apiserver metric" table, and nothing else of kube-apiserver's;
- every selector carries the scoping matchers (the dashboard's $namespace/$job
  variables, the rules' metrics.prometheusRule.selector, or for kube-apiserver's
  metrics metrics.prometheusRule.apiserverSelector), since kube-apiserver and
  kube-controller-manager export some of the same names;
- every alert has a severity, a summary, a description whose $labels exist in
  the expression's result, and a runbook_url whose anchor is a runbooks heading;
- the values (thresholds, durations, disabled, selector, namespaces, labels)
  reach the rendered objects;
- with promtool on PATH (or $PROMTOOL), the alerts fire and stay silent as
  tests/chart/alerts-test.yaml says (`promtool test rules`).

Run through `bash tests/chart/run.sh` (or `python -m pytest tests/chart -q` in
its venv).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess

import promql_parser
import pytest
import yaml

from test_chart import CHART, CI_VARIANTS, HERE, NAMESPACE, REPO, merged_values, objects, of_kind, one, \
    render_objects, schema_error, webhook_entries

# The operator's documents these checks hold to: the metrics table and the runbooks.
METRICS_DOC = REPO / "docs" / "reference" / "metrics.md"
RUNBOOKS = REPO / "docs" / "operate" / "runbooks.md"
DASHBOARD = CHART / "files" / "dashboard.json"

# The webhook's metrics the dashboard and the alerts rely on (webhook/src/metrics.rs),
# with their types: the metrics table (docs/reference/metrics.md) must list them (test_readme_metrics_table_is_read).
WEBHOOK_METRICS = {
    "svcplane_webhook_reviews_total": "counter",
    "svcplane_webhook_review_duration_seconds": "histogram",
    "svcplane_webhook_certificate_not_after_seconds": "gauge",
    "svcplane_webhook_certificate_reloads_total": "counter",
    "svcplane_webhook_claims_created_total": "counter",
    "svcplane_webhook_claim_races_lost_total": "counter",
    "svcplane_webhook_values_held": "gauge",
}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

ALERTS = {
    "SvcplaneNoLeader", "SvcplaneSyncErrors", "SvcplaneAPIWriteErrors", "SvcplaneWorkqueueBacklog",
    "SvcplaneSlowSyncs", "SvcplaneWebhookErrors", "SvcplaneWebhookDenialsRising", "SvcplaneWebhookSlow",
    "SvcplaneCertificateExpiring", "SvcplaneClusterIPRangeNearlyFull", "SvcplaneNodePortRangeNearlyFull",
    "SvcplaneClaimsNotReleased", "SvcplaneWebhookFailingOpen",
}
WEBHOOK_ALERTS = {"SvcplaneWebhookErrors", "SvcplaneWebhookDenialsRising", "SvcplaneWebhookSlow",
                  "SvcplaneCertificateExpiring", "SvcplaneClusterIPRangeNearlyFull",
                  "SvcplaneNodePortRangeNearlyFull", "SvcplaneClaimsNotReleased", "SvcplaneWebhookFailingOpen"}
DEFAULT_SELECTOR = {"job": "svcplane-metrics", "namespace": NAMESPACE}
# metrics.prometheusRule.apiserverSelector's default: kube-prometheus-stack's job for kube-apiserver.
DEFAULT_APISERVER_SELECTOR = {"job": "apiserver"}
RUNBOOK_BASE = "https://github.com/svcplane/svcplane/blob/main/docs/operate/runbooks.md"
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


# ------------------------------------------------------------ the allow-list


def _subsystem_prefix(previous: str) -> list[str]:
    """Prefixes an abbreviation `..._rest` may continue: what precedes `rest` in the
    previous name of the cell. The table abbreviates after the subsystem
    (`endpoint_slice_controller_`, `kube_apiserver_nodeport_allocator_`); a name without
    one allows every `_`-prefix of the previous name."""
    m = re.match(r"(.*_(?:controller|allocator)_)", previous)
    if m:
        return [m.group(1)]
    return [previous[:i + 1] for i, c in enumerate(previous) if c == "_"]


def _expand(token: str, previous: str | None) -> list[str]:
    """Metric names of one backticked metrics-table token: `..._x` abbreviations (after the
    previous name in the same cell), `a_{b,c}_d` alternatives, and a trailing label
    set `name{label}` dropped."""
    token = re.sub(r"(?<=[a-zA-Z0-9])\{[^{}]*\}$", "", token.strip())
    if token.startswith("..."):
        assert previous, f"metrics table: {token!r} abbreviates nothing"
        rest = token[3:].lstrip("_")
        stems = [p + rest for p in _subsystem_prefix(previous)]
    else:
        stems = [token]
    names: list[str] = []
    for stem in stems:
        m = re.search(r"(?:(?<=_)|^)\{([^{}]*)\}", stem)
        if m:
            for alt in m.group(1).split(","):
                names += _expand(stem[:m.start()] + alt.strip() + stem[m.end():], None)
        else:
            names.append(stem)
    return names


def _section(doc, heading: str) -> str:
    """`doc` from `heading` to its next heading of level 1 to 3 (or its end)."""
    text = doc.read_text()
    start = text.index(heading)
    ends = [i for i in (text.find(f"\n{h} ", start + 1) for h in ("#", "##", "###")) if i > 0]
    return text[start:min(ends, default=len(text))]


def readme_metrics() -> dict[str, str]:
    """{name: type} of the metrics table of docs/reference/metrics.md
    (type "histogram" where the row says so; in rows of mixed types the `_duration`
    and `_duration_seconds` names are the histograms)."""
    return _metric_table(METRICS_DOC.read_text(), "metric")


def readme_apiserver_metrics() -> dict[str, str]:
    """{name: type} of kube-apiserver's metrics the alerts read: the table headed
    "kube-apiserver metric" in the introduction of docs/operate/runbooks.md.
    These come from kube-apiserver's own scrape, never from svcplane's."""
    return _metric_table(_section(RUNBOOKS, "# Alerts and runbooks\n"), "kube-apiserver metric")


def _metric_table(section: str, header: str) -> dict[str, str]:
    """{name: type} of the rows of the tables in `section` whose first header cell is `header`."""
    out: dict[str, str] = {}
    in_table = False
    for line in section.splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == header:
            in_table = True
            continue
        if not in_table or set(cells[0]) <= {"-", " "}:
            continue
        kind = cells[1] if len(cells) > 1 else ""
        previous = None
        for token in re.findall(r"`([^`]+)`", cells[0]):
            names = _expand(token, previous)
            previous = names[0]
            for name in names:
                assert METRIC_NAME.fullmatch(name), f"metrics table: cannot read {token!r} ({name!r})"
                histogram = kind.startswith("histogram") or (
                    "histogram" in kind and re.search(r"_duration(_seconds)?$", name))
                out[name] = "histogram" if histogram else "mixed" if "," in kind else kind.split(" ")[0]
    return out


def allowed_metrics() -> set[str]:
    known = readme_metrics()
    names = set(known)
    for name, kind in known.items():
        if kind == "histogram":
            names |= {name + s for s in HISTOGRAM_SUFFIXES}
    return names


ALLOWED = allowed_metrics()
# kube-apiserver's metrics (rules only, under metrics.prometheusRule.apiserverSelector)
APISERVER_ALLOWED = set(readme_apiserver_metrics())


def test_readme_metrics_table_is_read():
    names = readme_metrics()
    # one of each form: plain, `..._x` abbreviation, {a,b} alternatives, trailing {label}
    for want in ("workqueue_depth", "svcplane_build_info", "endpoint_slice_controller_syncs",
                 "endpoint_slice_controller_endpoints_removed_per_sync",
                 "endpoint_slice_controller_desired_endpoint_slices",
                 "endpoint_slice_mirroring_controller_endpoints_updated_per_sync",
                 "endpoint_slice_mirroring_controller_endpoints_sync_duration",
                 "endpoint_slice_mirroring_controller_num_endpoint_slices",
                 "endpoint_slice_mirroring_controller_changes",
                 "kube_apiserver_clusterip_allocator_available_ips",
                 "kube_apiserver_nodeport_allocator_allocation_errors_total",
                 "svcplane_webhook_claim_repair_passes_total"):
        assert want in names, f"{want} not read from the metrics table: {sorted(names)}"
    assert names["svcplane_reconcile_duration_seconds"] == "histogram"
    assert names["workqueue_work_duration_seconds"] == "histogram"
    assert names["workqueue_queue_duration_seconds"] == "histogram"
    assert names["workqueue_depth"] != "histogram"
    assert names["workqueue_longest_running_processor_seconds"] != "histogram"
    assert "workqueue_depth_bucket" not in ALLOWED
    for name, kind in WEBHOOK_METRICS.items():
        assert name in names, f"docs/reference/metrics.md lacks {name}"
        assert (names[name] == "histogram") == (kind == "histogram"), f"{name}: {names[name]}"
    assert "svcplane_webhook_review_duration_seconds_bucket" in ALLOWED


def test_readme_lists_the_kube_apiserver_metrics_the_alerts_read():
    names = readme_apiserver_metrics()
    assert names == {"apiserver_admission_webhook_fail_open_count": "counter"}, names
    # a name in both lists would leave open which scrape (and selector) it comes from
    assert not APISERVER_ALLOWED & ALLOWED, APISERVER_ALLOWED & ALLOWED
    # svcplane's own table is untouched by it: the dashboard may not use it
    assert "apiserver_admission_webhook_fail_open_count" not in ALLOWED


# ------------------------------------------------------------------- PromQL


def parse(expr: str, where: str):
    try:
        return promql_parser.parse(expr)
    except ValueError as e:
        raise AssertionError(f"{where}: PromQL does not parse: {e}\n{expr}") from None


def selectors(ast) -> list:
    found = []

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)

    promql_parser.walk(ast, visit)
    return found


def metric_name(sel) -> str:
    if sel.name:
        return sel.name
    by_name = [m for m in sel.matchers.matchers if m.name == "__name__"]
    assert by_name and str(by_name[0].op).endswith("Equal") and not str(by_name[0].op).endswith("NotEqual"), \
        f"selector {sel} names no single metric"
    return by_name[0].value


def equality_matchers(sel) -> dict[str, str]:
    return {m.name: m.value for m in sel.matchers.matchers if str(m.op) == "MatchOp.Equal"}


def unknown_metrics(exprs: dict[str, str], allowed: set[str] = ALLOWED) -> list[str]:
    bad = []
    for where, expr in exprs.items():
        for sel in selectors(parse(expr, where)):
            name = metric_name(sel)
            if name not in allowed:
                bad.append(f"{where}: {name}")
    return bad


def result_labels(node) -> set[str] | None:
    """Labels an expression's result series can carry; None when unconstrained."""
    t = type(node).__name__
    if t == "ParenExpr":
        return result_labels(node.expr)
    if t == "AggregateExpr":
        if node.modifier is not None and str(node.modifier.type).endswith("By"):
            return set(node.modifier.labels)
        if node.modifier is None:
            return set()
        return None
    if t == "BinaryExpr":
        op = str(node.op)
        lhs, rhs = result_labels(node.lhs), result_labels(node.rhs)
        if op == "or":
            return None if lhs is None or rhs is None else lhs | rhs
        if type(node.lhs).__name__ == "NumberLiteral":
            return rhs
        return lhs
    if t == "Call":
        if node.func.name == "histogram_quantile":
            inner = result_labels(node.args[1])
            return None if inner is None else inner - {"le"}
        if node.func.name in ("time", "vector"):
            return set()
        if node.func.name == "absent":
            return set(equality_matchers(node.args[0]))
        vectors = [a for a in node.args if type(a).__name__ not in ("NumberLiteral", "StringLiteral")]
        return result_labels(vectors[0]) if vectors else set()
    if t in ("NumberLiteral", "StringLiteral"):
        return set()
    return None  # selectors, subqueries: every label of the series


def grafana_to_promql(expr: str) -> str:
    """Grafana's interval macros as a duration; $variables are only in label values."""
    return re.sub(r"\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}", "5m", expr)


# ---------------------------------------------------------------- dashboard


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_panels(d: dict) -> list[dict]:
    out = []
    for p in d["panels"]:
        out.append(p)
        out += p.get("panels", [])  # collapsed rows hold their panels
    return out


def dashboard_exprs(d: dict) -> dict[str, str]:
    exprs = {}
    for p in dashboard_panels(d):
        for t in p.get("targets", []):
            exprs[f"panel {p['id']} {p['title']!r} target {t['refId']}"] = grafana_to_promql(t["expr"])
    for v in d["templating"]["list"]:
        if v["type"] != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)", q)
        assert m, f"variable {v['name']}: {q!r} is not label_values(selector, label)"
        exprs[f"variable {v['name']}"] = m.group(1)
    return exprs


def test_dashboard_is_a_grafana_model_with_a_prometheus_datasource_variable():
    d = dashboard()
    assert d["uid"] == "svcplane" and d["title"]
    assert 36 <= d["schemaVersion"] <= 41
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "job"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert "id" not in d or d["id"] is None, "an exported dashboard's id would clash on import"


def test_dashboard_panels_are_laid_out_and_use_the_variable_datasource():
    d = dashboard()
    panels = dashboard_panels(d)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    cells = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, f"{p['title']}: {g}"
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps another panel at {x},{y}"
                cells.add((x, y))
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], f"{p['title']} has no query"
        assert p.get("description"), f"{p['title']} has no description"
        for t in p["targets"]:
            assert t.get("datasource", p["datasource"]) == p["datasource"], p["title"]


def test_dashboard_exprs_parse_and_name_only_exported_metrics():
    exprs = dashboard_exprs(dashboard())
    assert len(exprs) > 20
    assert not unknown_metrics(exprs), "metrics svcplane does not export:\n" + "\n".join(unknown_metrics(exprs))


def test_dashboard_selectors_are_scoped_by_the_variables():
    for where, expr in dashboard_exprs(dashboard()).items():
        if where.startswith("variable"):
            continue
        for sel in selectors(parse(expr, where)):
            m = equality_matchers(sel)
            assert m.get("namespace") == "$namespace" and m.get("job") == "$job", \
                f"{where}: {sel} lacks namespace=\"$namespace\",job=\"$job\""


def test_dashboard_covers_the_promised_metrics():
    used = set()
    for where, expr in dashboard_exprs(dashboard()).items():
        used |= {metric_name(s) for s in selectors(parse(expr, where))}
    want = {
        "leader_election_master_status", "endpoint_slice_controller_syncs", "svcplane_api_writes_total",
        "svcplane_api_write_errors_total", "svcplane_reconcile_duration_seconds_bucket", "workqueue_depth",
        "workqueue_adds_total", "workqueue_retries_total", "workqueue_work_duration_seconds_bucket",
        "svcplane_cache_objects", "svcplane_webhook_reviews_total", "svcplane_webhook_review_duration_seconds_bucket",
        "svcplane_webhook_certificate_not_after_seconds", "svcplane_webhook_claims_released_total",
        "svcplane_webhook_claims_taken_over_total", "svcplane_webhook_claim_repair_passes_total",
        "svcplane_webhook_claims_created_total", "svcplane_webhook_claim_races_lost_total",
        "kube_apiserver_clusterip_allocator_allocated_ips", "kube_apiserver_clusterip_allocator_available_ips",
        "kube_apiserver_nodeport_allocator_allocated_ports", "kube_apiserver_nodeport_allocator_available_ports",
        "svcplane_build_info",
    }
    assert not want - used, f"the dashboard shows none of: {sorted(want - used)}"


def dashboard_configmaps(objs: list[dict]) -> list[dict]:
    return [o for o in of_kind(objs, "ConfigMap") if o["metadata"]["name"] == "svcplane-dashboard"]


def test_dashboard_configmap_only_when_enabled():
    assert not dashboard_configmaps(objects("default"))
    cm = one(render_objects({"metrics": {"dashboard": {"enabled": True}}}), "ConfigMap", "svcplane-dashboard")
    assert json.loads(cm["data"]["svcplane.json"]) == dashboard()
    assert cm["metadata"]["namespace"] == NAMESPACE
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["labels"]["app.kubernetes.io/name"] == "svcplane"
    assert "annotations" not in cm["metadata"]
    # kubectl apply keeps the whole object in an annotation (256 KiB at most)
    assert len(cm["data"]["svcplane.json"]) < 200_000


def test_dashboard_configmap_follows_values():
    cm = one(render_objects({"metrics": {"dashboard": {
        "enabled": True, "namespace": "monitoring", "labels": {"grafana_dashboard": None, "dashboards": "svcplane"},
        "annotations": {"grafana_folder": "Networking"}}}}), "ConfigMap", "svcplane-dashboard")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["dashboards"] == "svcplane"
    assert "grafana_dashboard" not in cm["metadata"]["labels"]
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Networking"}


# ---------------------------------------------------------------- the rules


def rule_objects(values: dict | None = None) -> list[dict]:
    v = copy.deepcopy(values or {})
    v.setdefault("metrics", {}).setdefault("prometheusRule", {})["enabled"] = True
    return render_objects(v)


def rules_of(objs: list[dict]) -> list[dict]:
    pr = one(objs, "PrometheusRule")
    return [r for g in pr["spec"]["groups"] for r in g["rules"]]


def alerts(values: dict | None = None) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rules_of(rule_objects(values)):
        out.setdefault(r["alert"], []).append(r)
    return out


def readme_anchors() -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but '-' and '_' dropped,
    spaces to '-' (repeats get -1, -2: not needed here)."""
    anchors = set()
    fenced = False
    for line in RUNBOOKS.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        m = re.match(r"#{1,6} (.+)", line)
        if m:
            title = m.group(1).strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def runbook_headings() -> list[str]:
    """The runbooks: docs/operate/runbooks.md's second-level headings named like an alert."""
    return re.findall(r"^## (Svcplane\S+)$", RUNBOOKS.read_text(), re.M)


def test_no_prometheus_rule_by_default():
    for v in ["default"] + CI_VARIANTS:
        assert bool(of_kind(objects(v), "PrometheusRule")) == merged_values(v)["metrics"]["prometheusRule"]["enabled"]


def test_there_is_an_observability_variant():
    assert any(merged_values(v)["metrics"]["prometheusRule"]["enabled"]
               and merged_values(v)["metrics"]["dashboard"]["enabled"]
               and merged_values(v)["metrics"]["serviceMonitor"]["enabled"] for v in CI_VARIANTS)


def test_prometheus_rule_object():
    pr = one(rule_objects({"metrics": {"prometheusRule": {"labels": {"release": "prometheus"}}}}), "PrometheusRule")
    assert pr["apiVersion"] == "monitoring.coreos.com/v1"
    assert pr["metadata"]["name"] == "svcplane" and pr["metadata"]["namespace"] == NAMESPACE
    assert pr["metadata"]["labels"]["release"] == "prometheus"
    names = [g["name"] for g in pr["spec"]["groups"]]
    assert len(names) == len(set(names)) and all(g["rules"] for g in pr["spec"]["groups"])
    pr = one(rule_objects({"metrics": {"prometheusRule": {"namespace": "monitoring"}}}), "PrometheusRule")
    assert pr["metadata"]["namespace"] == "monitoring"


def test_every_alert_is_rendered_by_default():
    assert set(alerts()) == ALERTS


@pytest.mark.parametrize("variant", ["default, enabled"] + [
    v for v in CI_VARIANTS if merged_values(v)["metrics"]["prometheusRule"]["enabled"]])
def test_rules_parse_name_only_exported_metrics_and_are_scoped(variant):
    rules = rules_of(rule_objects() if variant == "default, enabled" else objects(variant))
    exprs = {f"{r['alert']} ({r['labels']['severity']})": r["expr"] for r in rules}
    bad = unknown_metrics(exprs, ALLOWED | APISERVER_ALLOWED)
    assert not bad, "metrics neither svcplane nor (as docs/operate/runbooks.md lists) kube-apiserver exports:\n" + "\n".join(bad)
    for where, expr in exprs.items():
        for sel in selectors(parse(expr, where)):
            m = equality_matchers(sel)
            if metric_name(sel) in APISERVER_ALLOWED:
                # kube-apiserver's scrape: its own selector, never svcplane's
                assert {k: m.get(k) for k in DEFAULT_APISERVER_SELECTOR} == DEFAULT_APISERVER_SELECTOR, \
                    f"{where}: {sel} is not scoped to kube-apiserver"
                assert m.get("job") != DEFAULT_SELECTOR["job"] and "namespace" not in m, f"{where}: {sel}"
            else:
                assert {k: m.get(k) for k in DEFAULT_SELECTOR} == DEFAULT_SELECTOR, f"{where}: {sel} is not scoped"


def test_every_alert_has_severity_summary_description_and_a_runbook():
    anchors = readme_anchors()
    for r in rules_of(rule_objects()):
        name = r["alert"]
        assert r["labels"]["severity"] in ("warning", "critical"), name
        assert re.fullmatch(r"([0-9]+(ms|s|m|h|d|w|y))+", r["for"]), f"{name}: for {r['for']!r}"
        ann = r["annotations"]
        assert ann["summary"].strip() and ann["description"].strip(), name
        url = ann["runbook_url"]
        assert url == f"{RUNBOOK_BASE}#{name.lower()}", url
        assert name.lower() in anchors, f"{name}: docs/operate/runbooks.md has no heading for #{name.lower()}"
        assert name in runbook_headings(), f"{name}: no '## {name}' in docs/operate/runbooks.md"


def test_every_runbook_is_an_alert():
    assert set(runbook_headings()) == ALERTS


def test_descriptions_use_only_labels_the_expression_keeps():
    for r in rules_of(rule_objects()):
        text = r["annotations"]["description"] + r["annotations"]["summary"]
        # Prometheus' templates: balanced, only $labels.x and $value
        actions = re.findall(r"\{\{(.*?)\}\}", text)
        assert text.count("{{") == text.count("}}") == len(actions), r["alert"]
        for a in actions:
            assert re.fullmatch(r" (\$labels\.[a-z_]+|\$value)( \| (humanize|humanizePercentage|humanizeDuration))? ",
                                a), f"{r['alert']}: {{{{{a}}}}}"
        used = set(re.findall(r"\$labels\.([a-z_]+)", text))
        keeps = result_labels(parse(r["expr"], r["alert"]))
        if keeps is not None:
            assert used <= keeps, f"{r['alert']}: description uses {used - keeps}, the expression keeps {keeps}"


def test_no_leader_fires_on_absence_and_follows_the_lease_name():
    (rule,) = alerts()["SvcplaneNoLeader"]
    ast = parse(rule["expr"], "SvcplaneNoLeader")
    assert str(ast.op) == "or", "without `or absent(...)` no series means no alert"
    calls = [n for n in [ast.rhs] if type(n).__name__ == "Call"]
    assert calls and calls[0].func.name == "absent"
    for sel in selectors(ast):
        assert equality_matchers(sel)["name"] == "svcplane"
    (rule,) = alerts({"leaderElection": {"resourceName": "my-lease"}})["SvcplaneNoLeader"]
    assert all(equality_matchers(s)["name"] == "my-lease" for s in selectors(parse(rule["expr"], "NoLeader")))
    assert rule["labels"]["severity"] == "critical"


def test_claims_not_released_looks_at_the_leader_only():
    (rule,) = alerts()["SvcplaneClaimsNotReleased"]
    ast = parse(rule["expr"], "SvcplaneClaimsNotReleased")
    assert str(ast.op) == "and"
    assert set(ast.modifier.matching.labels) == {"job", "instance"}
    assert metric_name(selectors(ast.rhs)[0]) == "leader_election_master_status"
    no_le = alerts({"leaderElection": {"enabled": False}, "replicaCount": 1,
                    "podDisruptionBudget": {"enabled": False}})
    assert "SvcplaneNoLeader" not in no_le
    (rule,) = no_le["SvcplaneClaimsNotReleased"]
    assert "leader_election_master_status" not in rule["expr"]
    (rule,) = alerts({"metrics": {"prometheusRule": {"rules": {"SvcplaneClaimsNotReleased": {"window": "30m"}}}}})[
        "SvcplaneClaimsNotReleased"]
    assert "[30m]" in rule["expr"]


def test_certificate_alert_has_a_warning_and_a_critical_rule():
    rules = {r["labels"]["severity"]: r for r in alerts({"metrics": {"prometheusRule": {"rules": {
        "SvcplaneCertificateExpiring": {"warningDays": 14, "criticalDays": 2}}}}})["SvcplaneCertificateExpiring"]}
    assert set(rules) == {"warning", "critical"}
    assert re.search(r"< 14 \* 86400 >= 2 \* 86400$", rules["warning"]["expr"]), rules["warning"]["expr"]
    assert re.search(r"< 2 \* 86400$", rules["critical"]["expr"]), rules["critical"]["expr"]


@pytest.mark.parametrize("timeout, threshold", [(5, "4"), (3, "2.4"), (10, "5")])
def test_webhook_slow_follows_the_webhook_timeout(timeout, threshold):
    (rule,) = alerts({"webhook": {"timeoutSeconds": timeout, "requestTimeout": "2s"}})["SvcplaneWebhookSlow"]
    assert rule["expr"].endswith(f">= {threshold}"), rule["expr"]
    assert f"({timeout}s)" in rule["annotations"]["description"]


def failing_open(values: dict | None = None) -> tuple[dict, object, dict[str, object]]:
    """The SvcplaneWebhookFailingOpen rule, its one selector and that selector's
    matchers by label."""
    (rule,) = alerts(values)["SvcplaneWebhookFailingOpen"]
    (sel,) = selectors(parse(rule["expr"], "SvcplaneWebhookFailingOpen"))
    return rule, sel, {m.name: m for m in sel.matchers.matchers}


def webhook_names(objs: list[dict]) -> set[str]:
    return {w["name"] for _, w in webhook_entries(objs)}


@pytest.mark.parametrize("values", [{}, {"fullnameOverride": "netplane"}, {"nameOverride": "sp"}],
                         ids=["default", "fullnameOverride", "nameOverride"])
def test_webhook_failing_open_watches_exactly_the_charts_webhooks(values):
    rule, sel, m = failing_open(values)
    assert metric_name(sel) == "apiserver_admission_webhook_fail_open_count"
    names = webhook_names(rule_objects(values))
    assert names == {"mutate.services.svcplane.io", "validate.services.svcplane.io"}, names
    if values:
        # the configurations follow the override, the webhooks' names (the metric's `name`) do not
        configs = {c["metadata"]["name"] for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
                   for c in of_kind(rule_objects(values), kind)}
        assert "svcplane" not in configs, configs
    assert str(m["name"].op) == "MatchOp.Re"
    pattern = m["name"].value
    for name in names:
        assert re.fullmatch(pattern, name), f"{pattern!r} misses {name}"
    # Prometheus anchors the regex; dots are literal
    for other in ("mutateXservicesXsvcplaneXio", "validate.services.svcplane.io.evil", "policy.example.com",
                  "services.svcplane.io", ""):
        assert not re.fullmatch(pattern, other), f"{pattern!r} matches {other!r}"
    assert rule["expr"] == (
        'increase(apiserver_admission_webhook_fail_open_count{job="apiserver",'
        'name=~"mutate\\\\.services\\\\.svcplane\\\\.io|validate\\\\.services\\\\.svcplane\\\\.io"}[5m]) > 0')
    assert rule["for"] == "10m" and rule["labels"]["severity"] == "warning"
    for text in (rule["annotations"]["summary"], rule["annotations"]["description"]):
        assert "{{ $labels.name }}" in text and "{{ $labels.type }}" in text, text
    assert "in the last 5m." in rule["annotations"]["description"]


def test_webhook_failing_open_follows_its_own_selector_window_and_for():
    rule, sel, m = failing_open({"metrics": {"prometheusRule": {
        "apiserverSelector": 'job="kube-apiserver", cluster="prod"',
        "selector": 'job="kubernetes-pods",app_kubernetes_io_name="svcplane"',
        "rules": {"SvcplaneWebhookFailingOpen": {"window": "15m", "for": "30m"}}}}})
    eq = equality_matchers(sel)
    assert eq["job"] == "kube-apiserver" and eq["cluster"] == "prod", eq
    assert "app_kubernetes_io_name" not in eq, "svcplane's selector must not reach kube-apiserver's series"
    assert "[15m]" in rule["expr"] and rule["for"] == "30m"
    assert "in the last 15m." in rule["annotations"]["description"]
    # empty: the webhook names alone pick the series
    rule, sel, m = failing_open({"metrics": {"prometheusRule": {"apiserverSelector": ""}}})
    assert set(m) == {"__name__", "name"} or set(m) == {"name"}, m
    assert rule["expr"].startswith('increase(apiserver_admission_webhook_fail_open_count{name=~"'), rule["expr"]


def test_webhook_failing_open_can_be_disabled_and_needs_failure_policy_ignore():
    a = alerts({"metrics": {"prometheusRule": {"disabled": ["SvcplaneWebhookFailingOpen"]}}})
    assert set(a) == ALERTS - {"SvcplaneWebhookFailingOpen"}
    # under Fail the calls are refused, never counted as failing open
    a = alerts({"webhook": {"failurePolicy": "Fail"}})
    assert set(a) == ALERTS - {"SvcplaneWebhookFailingOpen"}
    assert "SvcplaneWebhookFailingOpen" not in alerts({"webhook": {"enabled": False}})


def test_thresholds_and_durations_follow_values():
    values = {"metrics": {"prometheusRule": {"rules": {
        "SvcplaneNoLeader": {"for": "2m"},
        "SvcplaneSyncErrors": {"for": "30m", "errorRatio": 0.05},
        "SvcplaneAPIWriteErrors": {"errorsPerSecond": 0.5},
        "SvcplaneWorkqueueBacklog": {"depth": 250},
        "SvcplaneSlowSyncs": {"p99Seconds": 2.5},
        "SvcplaneWebhookErrors": {"errorsPerSecond": 0.1},
        "SvcplaneWebhookDenialsRising": {"denialsPerSecond": 3},
        "SvcplaneClusterIPRangeNearlyFull": {"usedRatio": 0.8, "for": "1h"},
        "SvcplaneNodePortRangeNearlyFull": {"usedRatio": 0.85},
    }}}}
    a = {k: v[0] for k, v in alerts(values).items()}
    assert a["SvcplaneNoLeader"]["for"] == "2m"
    assert a["SvcplaneSyncErrors"]["for"] == "30m" and a["SvcplaneSyncErrors"]["expr"].endswith("> 0.05")
    assert a["SvcplaneAPIWriteErrors"]["expr"].endswith("> 0.5")
    assert 'reason!~"conflict|not_found|namespace_terminating"' in a["SvcplaneAPIWriteErrors"]["expr"]
    assert a["SvcplaneWorkqueueBacklog"]["expr"].endswith("> 250")
    assert a["SvcplaneSlowSyncs"]["expr"].endswith("> 2.5")
    assert a["SvcplaneWebhookErrors"]["expr"].endswith("> 0.1")
    assert a["SvcplaneWebhookDenialsRising"]["expr"].endswith("> 3")
    assert a["SvcplaneClusterIPRangeNearlyFull"]["expr"].endswith("> 0.8")
    assert a["SvcplaneClusterIPRangeNearlyFull"]["for"] == "1h"
    assert a["SvcplaneNodePortRangeNearlyFull"]["expr"].endswith("> 0.85")
    defaults = {k: v[0] for k, v in alerts().items()}
    assert defaults["SvcplaneNoLeader"]["for"] == "5m"
    assert defaults["SvcplaneWorkqueueBacklog"]["expr"].endswith("> 100")
    assert defaults["SvcplaneWebhookErrors"]["for"] == "10m"


def test_selector_runbook_base_and_alert_labels_follow_values():
    sel = 'job="kubernetes-pods",app_kubernetes_io_name="svcplane"'
    rules = rules_of(rule_objects({"metrics": {"prometheusRule": {
        "selector": sel, "runbookBaseURL": "", "alertLabels": {"team": "platform"}}}}))
    for r in rules:
        for s in selectors(parse(r["expr"], r["alert"])):
            m = equality_matchers(s)
            if metric_name(s) in APISERVER_ALLOWED:
                assert m.get("job") == "apiserver" and "app_kubernetes_io_name" not in m, r["alert"]
                continue
            assert m.get("job") == "kubernetes-pods" and m.get("app_kubernetes_io_name") == "svcplane", r["alert"]
            assert "namespace" not in m, r["alert"]
        assert "runbook_url" not in r["annotations"]
        assert r["labels"]["team"] == "platform"
    rules = rules_of(rule_objects({"metrics": {"prometheusRule": {"runbookBaseURL": "https://wiki.example/svcplane"}}}))
    assert all(r["annotations"]["runbook_url"] == f"https://wiki.example/svcplane#{r['alert'].lower()}" for r in rules)


def test_disabled_alerts_and_webhook_off():
    a = alerts({"metrics": {"prometheusRule": {"disabled": ["SvcplaneWebhookDenialsRising", "SvcplaneNoLeader"]}}})
    assert set(a) == ALERTS - {"SvcplaneWebhookDenialsRising", "SvcplaneNoLeader"}
    assert set(alerts({"webhook": {"enabled": False}})) == ALERTS - WEBHOOK_ALERTS
    pr = one(rule_objects({"webhook": {"enabled": False}, "metrics": {"prometheusRule": {
        "disabled": sorted(ALERTS - WEBHOOK_ALERTS)}}}), "PrometheusRule")
    assert pr["spec"]["groups"] == []


@pytest.mark.parametrize("values, pointer", [
    ({"metrics": {"prometheusRule": {"disabled": ["SvcplaneNoSuchAlert"]}}}, "/metrics/prometheusRule/disabled/0"),
    ({"metrics": {"prometheusRule": {"rules": {"SvcplaneNoLeader": {"for": "5 minutes"}}}}},
     "/metrics/prometheusRule/rules/SvcplaneNoLeader/for"),
    ({"metrics": {"prometheusRule": {"rules": {"SvcplaneClusterIPRangeNearlyFull": {"usedRatio": 90}}}}},
     "/metrics/prometheusRule/rules/SvcplaneClusterIPRangeNearlyFull/usedRatio"),
    ({"metrics": {"prometheusRule": {"rules": {"SvcplaneNoSuchAlert": {"for": "5m"}}}}},
     "/metrics/prometheusRule/rules"),
    ({"metrics": {"prometheusRule": {"selector": 'job="svcplane'}}}, "/metrics/prometheusRule/selector"),
    ({"metrics": {"prometheusRule": {"apiserverSelector": "job=apiserver"}}},
     "/metrics/prometheusRule/apiserverSelector"),
    ({"metrics": {"prometheusRule": {"rules": {"SvcplaneWebhookFailingOpen": {"window": "5"}}}}},
     "/metrics/prometheusRule/rules/SvcplaneWebhookFailingOpen/window"),
    ({"metrics": {"prometheusRule": {"runbookBaseURL": "README.md#"}}}, "/metrics/prometheusRule/runbookBaseURL"),
    ({"metrics": {"dashboard": {"namespace": "Monitoring"}}}, "/metrics/dashboard/namespace"),
])
def test_schema_refuses_bad_observability_values(values, pointer):
    assert pointer in schema_error(values)


def test_alerts_fire_as_the_unit_tests_say(tmp_path):
    """`promtool test rules tests/chart/alerts-test.yaml` against the default rules.
    promtool is a Prometheus release binary, not a PyPI package: the test runs where
    one is on PATH or named by $PROMTOOL, and is skipped elsewhere."""
    tool = os.environ.get("PROMTOOL") or shutil.which("promtool")
    if not tool:
        pytest.skip("promtool not found (PATH or $PROMTOOL): tests/chart/alerts-test.yaml not run")
    pr = one(rule_objects(), "PrometheusRule")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": pr["spec"]["groups"]}, sort_keys=False))
    shutil.copy(HERE / "alerts-test.yaml", tmp_path / "alerts-test.yaml")
    for args in (["check", "rules", "rules.yaml"], ["test", "rules", "alerts-test.yaml"]):
        run = subprocess.run([tool, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, f"promtool {' '.join(args)}:\n{run.stdout}\n{run.stderr}"
