"""The files under ``deploy/``: Kubernetes manifests pass schema validation (offline,
bundled schemas), and the dashboard and alert rules name only metrics Awa emits."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from awa.runtime import metrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
KUBERNETES_VERSION = "1.30.0"
_SERIES = re.compile(r"\bawa_[a-z0-9_]+")
_LABELS = {name.replace(".", "_") for name in metrics.ATTRIBUTES}


_GROUPING = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)"
    r"|,\s*(awa_[a-z0-9_]+)\s*\)"  # label_values(series, label)
)
_MATCHER = re.compile(r"\b(awa_[a-z0-9_]+)\s*(?:=~|!~|!=|=)")


def _names(expr: str) -> set[str]:
    """The awa series an expression reads; the label names it matches or groups by must
    be ones awa sets (a label may share its name with a series: awa_storage_state)."""
    labels = set(_MATCHER.findall(expr))
    for groups in _GROUPING.findall(expr):
        labels |= {name for group in groups for name in _SERIES.findall(group)}
    assert labels <= _LABELS, sorted(labels - _LABELS)
    return set(_SERIES.findall(_MATCHER.sub(" ", _GROUPING.sub(" ", expr))))


# Records every instrument once and prints the Prometheus text the health listener serves.
_SCRAPE = """
from awa.entrypoints import telemetry
from awa.runtime import metrics

telemetry.enable_prometheus()
inst = metrics.instruments()
key = ((metrics.ATTR_QUEUE, "q"),)
for name, (kind, _, _) in metrics.METRICS.items():
    if kind == metrics.COUNTER:
        inst.count(name, key)
    elif kind == metrics.HISTOGRAM:
        inst.histograms[name].record(1.0, dict(key))
    else:
        inst.add_gauge_source(name, lambda: [(1.0, key)])
print(telemetry.prometheus_text()[0].decode())
"""


def _manifests() -> list[tuple[Path, dict[str, Any]]]:
    found = []
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                found.append((path, document))
    return found


@pytest.fixture(scope="module")
def emitted_series() -> set[str]:
    """Every series name (``_bucket``/``_sum``/``_count`` included) Awa exports."""
    text = subprocess.run(
        [sys.executable, "-c", _SCRAPE], capture_output=True, text=True, check=True
    ).stdout
    series = set()
    for line in text.splitlines():
        if line.startswith("awa_"):
            series.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return series


def test_every_manifest_passes_the_kubernetes_schema() -> None:
    manifests = _manifests()
    assert {m["kind"] for _, m in manifests} >= {"Deployment", "Job"}
    for path, manifest in manifests:
        try:
            kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{path.name}: {manifest['kind']}: {exc.message} at {exc.path}")


def test_the_worker_deployment_probes_and_drains_as_documented() -> None:
    (deployment,) = [m for _, m in _manifests() if m["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"]["cpu"]
    args = container["args"]
    drain_ms = int(args[args.index("--shutdown-timeout-ms") + 1])
    assert pod["terminationGracePeriodSeconds"] * 1000 > drain_ms
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["AWA_HEALTH_ADDR"].endswith(":8321")


def test_the_dashboard_names_only_emitted_metrics(emitted_series: set[str]) -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "awa-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    used = {name for expr in exprs for name in _names(expr)}
    assert used, "the dashboard queries no awa metric"
    assert used <= emitted_series, sorted(used - emitted_series)
    # The headline metrics are on it.
    assert {"awa_job_completed_total", "awa_queue_lag_seconds", "awa_queue_depth"} <= used
    # ... and so are the insert, DLQ, shard, descriptor and storage families.
    assert {
        "awa_job_inserted_total",
        "awa_job_dlq_moved_total",
        "awa_job_dlq_retried_total",
        "awa_job_dlq_purged_total",
        "awa_job_claimed_total",
        "awa_dispatch_empty_claim_total",
        "awa_queue_info",
        "awa_storage_state",
        "awa_storage_transition_ready",
        "awa_storage_canonical_live_backlog",
        "awa_storage_live_runtime_capability",
    } <= used


def test_the_alert_rules_name_only_emitted_metrics(emitted_series: set[str]) -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "awa-alerts.yaml").read_text())
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    names = {a["alert"] for a in alerts}
    assert names == {
        "AwaQueueLagHigh",
        "AwaErrorRateHigh",
        "AwaRescueSpike",
        "AwaNoLiveRuntime",
        "AwaThroughputCollapse",
    }
    for alert in alerts:
        assert alert["labels"]["severity"] in ("warning", "critical")
        assert alert["annotations"]["summary"]
        used = _names(alert["expr"])
        assert used and used <= emitted_series, (alert["alert"], sorted(used - emitted_series))
    lag = next(a for a in alerts if a["alert"] == "AwaQueueLagHigh")
    assert "> 300" in lag["expr"]
    error = next(a for a in alerts if a["alert"] == "AwaErrorRateHigh")
    assert "> 0.05" in error["expr"]


# ---------------------------------------------------------------- container images

_EXTRAS = re.compile(r"""["']?(?:\.|awa-py)\[([a-z0-9_,-]+)\]["']?""")


def _installed_extras(dockerfile: Path) -> list[set[str]]:
    """The extras each ``pip wheel`` / ``pip install`` line of ``dockerfile`` names."""
    found = []
    for line in dockerfile.read_text("utf-8").splitlines():
        if "pip wheel" in line or "pip install" in line:
            found += [set(m.split(",")) for m in _EXTRAS.findall(line)]
    return found


def test_the_cli_image_installs_what_awa_serve_needs() -> None:
    """The Deployment guide runs the admin UI from the CLI image: its wheel and install
    lines name every extra ``awa serve`` / ``awa callbacks serve`` need."""
    from awa.entrypoints.cli.serve import SERVE_EXTRAS

    lines = _installed_extras(DEPLOY / "docker" / "Dockerfile")
    assert len(lines) == 2, lines
    for extras in lines:
        assert set(SERVE_EXTRAS) | {"otel"} <= extras, extras
    pyproject = (DEPLOY.parent / "pyproject.toml").read_text("utf-8")
    for extra in SERVE_EXTRAS:
        assert re.search(rf"^{extra} = \[", pyproject, re.MULTILINE), extra


def _container_engine() -> str | None:
    """A container engine that answers (a client without its daemon does not count)."""
    import shutil

    for engine in ("docker", "podman"):
        if shutil.which(engine) is None:
            continue
        try:
            answered = subprocess.run([engine, "info"], capture_output=True, timeout=20)
        except subprocess.TimeoutExpired:
            continue
        if answered.returncode == 0:
            return engine
    return None


@pytest.mark.skipif(_container_engine() is None, reason="no container engine on this machine")
def test_the_cli_image_builds_and_runs_awa_serve_help() -> None:
    engine = _container_engine()
    assert engine is not None
    root = DEPLOY.parent
    tag = "awa-cli-test:latest"
    built = subprocess.run(
        [engine, "build", "-q", "-f", str(DEPLOY / "docker" / "Dockerfile"), "-t", tag, "."],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    ran = subprocess.run(
        [engine, "run", "--rm", tag, "serve", "--help"], capture_output=True, text=True
    )
    assert ran.returncode == 0 and "--host" in ran.stdout, ran.stderr
