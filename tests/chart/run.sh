#!/usr/bin/env bash
# Offline checks of the Helm chart charts/svcplane.
#
#   bash tests/chart/run.sh            # from the repository root (or anywhere)
#
# There is no helm binary, Docker engine or kubeconform here: the chart is
# linted, schema-checked and rendered with the pinned Helm v4 SDK from PyPI
# (helm-python-sdk), and every rendered manifest is validated with
# kubernetes-validate --strict against Kubernetes 1.33 and 1.37. PromQL in the
# Grafana dashboard and the PrometheusRule is parsed with promql-parser (the
# Rust promql-parser crate's Python binding), offline.
#
# Steps: venv (outside the repo, reused while it holds the pinned versions) ->
# yamllint Chart.yaml/values.yaml -> for the default values and every
# ci/*.yaml: render.py + kubernetes-validate --strict -k 1.33 and -k 1.37 ->
# bad values must fail -> pytest tests/chart (exit 5, "no tests", is a failure).
#
# Writes target/chart/manifests.yaml (default values) and
# target/chart/<variant>.yaml (one per ci/ file), install-ordered and joined
# with `---`, for `kubectl apply --dry-run=server -f` in e2e tests.
#
# Environment: SVCPLANE_CHART_VENV (default ${TMPDIR:-/tmp}/svcplane-chart-venv),
# PYTHON (default python3, >= 3.10). Needs PyPI the first time only.
# SVCPLANE_BIN (default target/debug/svcplane, else target/release/svcplane):
# when that binary has `run`, pytest also checks that it accepts every rendered
# flag set and that the shipped CRD equals `svcplane crd`; otherwise those
# tests are skipped (so run this after `cargo build`/`cargo test` in CI).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

HELM_SDK=helm-python-sdk==0.2.2
KVALIDATE=kubernetes-validate==1.37.0
YAMLLINT=yamllint==1.38.0
PROMQL=promql-parser==0.11.0
PYTEST='pytest>=8,<10'
KUBE_VERSIONS=(1.33 1.37)

CHART=charts/svcplane
OUT=target/chart
VENV=${SVCPLANE_CHART_VENV:-${TMPDIR:-/tmp}/svcplane-chart-venv}
PYTHON=${PYTHON:-python3}
export PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1

section() { printf '\n==> %s\n' "$*"; }
fail() { printf '\nFAIL: %s\n' "$*" >&2; exit 1; }
# Exit 77 (the usual "skipped" code): the tools could not be installed, which
# tests/tests/chart.rs reports as a skip (an error under CI=true).
unavailable() { printf '\nUNAVAILABLE: %s\n' "$*" >&2; exit 77; }
start=$SECONDS

# --- venv --------------------------------------------------------------------
section "python venv ($VENV)"
case "$(cd "$(dirname "$VENV")" 2>/dev/null && pwd -P)/" in
  "$(pwd -P)/"*) fail "the venv must live outside the repository: $VENV" ;;
esac
have_pins() {
  [[ -x $VENV/bin/python ]] || return 1
  "$VENV/bin/python" - "$HELM_SDK" "$KVALIDATE" "$YAMLLINT" "$PROMQL" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    if version(name) != want:
        sys.exit(1)
import pytest  # noqa: F401
import promql_parser  # noqa: F401
PY
}
if have_pins; then
  echo "reusing: the pinned versions are installed"
else
  echo "creating and installing $HELM_SDK $KVALIDATE $YAMLLINT $PROMQL $PYTEST"
  venv_start=$SECONDS
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV" || unavailable "could not create a venv with $PYTHON (is its venv module installed?)"
  "$VENV/bin/pip" install -q "$HELM_SDK" "$KVALIDATE" "$YAMLLINT" "$PROMQL" "$PYTEST" \
    || unavailable "pip install of the pinned chart tools failed (is PyPI reachable?)"
  have_pins || fail "the venv does not hold the pinned versions after install"
  echo "installed in $((SECONDS - venv_start))s ($(du -sh "$VENV" | cut -f1))"
fi
"$VENV/bin/python" -c 'import helm_python, kubernetes_validate, yaml, pytest; print("helm SDK", helm_python.helm_sdk_version(), "| kubernetes-validate", kubernetes_validate.__version__ if hasattr(kubernetes_validate, "__version__") else "", "| pytest", pytest.__version__)'

# --- yamllint ----------------------------------------------------------------
section "yamllint --strict: Chart.yaml, values.yaml, ci/*.yaml, tests/chart/bad-values.yaml"
"$VENV/bin/yamllint" --strict -d '{extends: relaxed, rules: {line-length: disable}}' \
  "$CHART/Chart.yaml" "$CHART/values.yaml" "$CHART"/ci/*.yaml tests/chart/bad-values.yaml \
  || fail "yamllint"
echo "ok"

# --- render + validate every variant -----------------------------------------
rm -rf "$OUT"
mkdir -p "$OUT"
variants=(default)
for f in "$CHART"/ci/*.yaml; do variants+=("$f"); done
[[ ${#variants[@]} -gt 1 ]] || fail "no $CHART/ci/*.yaml values variants"

for v in "${variants[@]}"; do
  if [[ $v == default ]]; then
    out=$OUT/manifests.yaml; args=()
  else
    name=$(basename "$v" .yaml); out=$OUT/${name%-values}.yaml; args=("$v")
  fi
  section "render + lint --strict (kube v1.33.0) + schema: ${v}"
  "$VENV/bin/python" tests/chart/render.py "$CHART" "$out" "${args[@]}" || fail "render of $v"
  for k in "${KUBE_VERSIONS[@]}"; do
    echo "kubernetes-validate --strict -k $k $out"
    # --quiet prints only failures and warnings (unknown kinds: cert-manager,
    # ServiceMonitor, PrometheusRule; pytest checks those by hand)
    "$VENV/bin/kubernetes-validate" --strict --quiet -k "$k" "$out" || fail "kubernetes-validate -k $k on $out"
  done
done

# --- the bad values file must be refused --------------------------------------
section "negative: tests/chart/bad-values.yaml must fail the schema"
if "$VENV/bin/python" tests/chart/render.py "$CHART" "$OUT/.bad.yaml" tests/chart/bad-values.yaml 2>"$OUT/.bad.err"; then
  fail "bad-values.yaml rendered: the schema accepted it"
fi
grep -q '/webhook/failurePolicy' "$OUT/.bad.err" || { cat "$OUT/.bad.err" >&2; fail "the error does not name /webhook/failurePolicy"; }
echo "refused as expected: $(grep -m1 -o "at '/webhook/failurePolicy'.*" "$OUT/.bad.err")"
rm -f "$OUT/.bad.yaml" "$OUT/.bad.err"

# --- pytest --------------------------------------------------------------------
section "python -m pytest tests/chart -q"
set +e
"$VENV/bin/python" -m pytest tests/chart -q -p no:cacheprovider
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  fail "pytest collected no tests (exit 5): tests/chart/test_chart.py is missing or broken"
elif [[ $rc -ne 0 ]]; then
  fail "pytest exited $rc"
fi

section "chart checks passed in $((SECONDS - start))s"
echo "variants: ${variants[*]}"
echo "kubernetes versions: ${KUBE_VERSIONS[*]}"
echo "rendered manifests:"
ls -1 "$OUT"/*.yaml | sed 's/^/  /'
