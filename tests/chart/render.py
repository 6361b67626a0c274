#!/usr/bin/env python3
"""Lint, schema-check and render the svcplane chart offline (see tests/chart/run.sh).

    python tests/chart/render.py CHART OUT.yaml [VALUES.yaml]

1. helm lint --strict for Kubernetes v1.33.0 (any finding of severity >= 2 fails);
2. the values (chart defaults merged with VALUES.yaml) against values.schema.json;
3. render as `helm template svcplane CHART -n kube-system` (an install), and
   write every non-empty document, the CRD included, joined with `---` to OUT.

Needs helm-python-sdk==0.2.2 (a Helm v4 SDK; there is no helm binary here).
Exits 1 with the error message (file:line for templates, JSON pointer for the
schema) on any failure. Importable: `render(chart, values_file)` returns the
documents as text.
"""

from __future__ import annotations

import pathlib
import sys

import helm_python as helm
import yaml

RELEASE = "svcplane"
NAMESPACE = "kube-system"
KUBE_VERSION = "v1.33.0"
SEVERITY = {0: "UNKNOWN", 1: "INFO", 2: "WARNING", 3: "ERROR"}
# Helm's install order (pkg/release/util/kind_sorter.go); other kinds go last.
# Written in this order, the file can be `kubectl apply`ed as Helm would.
INSTALL_ORDER = [
    "PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
    "PodDisruptionBudget", "ServiceAccount", "Secret", "ConfigMap", "CustomResourceDefinition",
    "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service", "DaemonSet", "Pod",
    "ReplicaSet", "Deployment", "StatefulSet", "Job", "CronJob", "APIService",
    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
]


class ChartError(Exception):
    """Lint finding, schema violation or template error."""


def load_values(values_file: str | None) -> dict:
    if not values_file:
        return {}
    data = yaml.safe_load(pathlib.Path(values_file).read_text()) or {}
    if not isinstance(data, dict):
        raise ChartError(f"{values_file}: values must be a mapping")
    return data


def render(chart_dir: str, values_file: str | None = None) -> list[str]:
    """The rendered documents (YAML text each) for a values file, in install order."""
    return render_values(chart_dir, load_values(values_file))


def render_values(chart_dir: str, values: dict, notes: dict | None = None,
                  namespace: str = NAMESPACE) -> list[str]:
    """Lint, schema-check and render with `values` into `namespace`; NOTES.txt goes to
    notes["text"]."""
    report = helm.lint(chart_dir, values, strict=True, namespace=namespace, kube_version=KUBE_VERSION)
    findings = [m for m in report.get("messages") or [] if m.get("severity", 0) >= 2]
    if findings or report.get("errors"):
        lines = [f"[{SEVERITY.get(m['severity'], m['severity'])}] {m.get('path')}: {m.get('error')}" for m in findings]
        lines += [str(e) for e in report.get("errors") or []]
        lines = list(dict.fromkeys(line.strip() for line in lines))  # lint repeats schema errors
        raise ChartError("helm lint --strict failed:\n  " + "\n  ".join(lines))
    with helm.Chart.load(chart_dir) as chart:
        try:
            chart.validate_schema(values)
        except helm.HelmError as e:
            raise ChartError(f"values schema: {e}") from e
        try:
            rendered = chart.render(values, name=RELEASE, namespace=namespace, is_install=True)
        except helm.HelmError as e:
            raise ChartError(f"render: {e}") from e
        # `helm template --include-crds`: files under crds/ (none today: the
        # CRD is a template) come first, as Helm installs them first.
        sources = [(c.get("filename") or c.get("name"), c["data"]) for c in chart.crds]
    sources += sorted(rendered.items())
    docs: list[tuple[int, str]] = []
    for path, text in sources:
        if path.endswith("NOTES.txt"):
            if notes is not None:
                notes["text"] = text
            continue
        for doc in text.split("\n---"):
            doc = doc.strip("\n")
            if doc.startswith("---"):
                doc = doc[3:].lstrip("\n")
            try:
                obj = yaml.safe_load(doc)
            except yaml.YAMLError as e:
                raise ChartError(f"{path}: rendered invalid YAML: {e}") from e
            if obj is None:  # empty or comments only
                continue
            if not isinstance(obj, dict) or "kind" not in obj:
                raise ChartError(f"{path}: rendered a document that is not an object with a kind")
            kind = obj["kind"]
            rank = INSTALL_ORDER.index(kind) if kind in INSTALL_ORDER else len(INSTALL_ORDER)
            docs.append((rank, f"# Source: {path}\n{doc}\n"))
    if not docs:
        raise ChartError("the chart rendered no objects")
    docs.sort(key=lambda d: d[0])  # stable: file order within a kind
    return [d for _, d in docs]


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    chart_dir, out = argv[1], pathlib.Path(argv[2])
    values_file = argv[3] if len(argv) == 4 else None
    try:
        docs = render(chart_dir, values_file)
    except (ChartError, helm.HelmError, OSError, yaml.YAMLError) as e:
        print(f"render.py: {values_file or 'default values'}: {e}", file=sys.stderr)
        return 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("---\n" + "---\n".join(docs))
    print(f"rendered {len(docs)} objects ({values_file or 'default values'}) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
