"""The Grafana dashboard (charts/ascend-hybrid-operator/dashboards/ascend-hybrid.json): well-formed, and every
panel's PromQL names only series that exist: the operator's (ascend_hybrid.controller.metrics), the bundled trainer's
(ascend_hybrid_trainer.metrics) and the npu-exporter's (as the simulated one exports them)."""

from __future__ import annotations

import json
import re

import pytest
from prometheus_client import metrics as client_metrics

from ascend_hybrid.controller import metrics as operator_metrics
from ascend_hybrid.devcluster.telemetry import figures
from ascend_hybrid_trainer.metrics import TrainerMetrics
from support.paths import REPO_ROOT

DASHBOARD = REPO_ROOT / "charts" / "ascend-hybrid-operator" / "dashboards" / "ascend-hybrid.json"
SERIES_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def series_names(families) -> set[str]:
    """The names a scrape shows for these families (a counter `x` is `x_total`, a histogram `x_bucket`…)."""
    return {family.name + suffix for family in families for suffix in SERIES_SUFFIXES[family.type]}


def operator_series() -> set[str]:
    collectors = [value for value in vars(operator_metrics).values()
                  if isinstance(value, client_metrics.MetricWrapperBase)]
    return series_names(family for collector in collectors for family in collector.collect())


def trainer_series() -> set[str]:
    return series_names(TrainerMetrics(npu_reader=lambda: {"0": 50.0}).registry.collect())


def exporter_series() -> set[str]:
    return series_names(figures.exporter_families([]))


def metric_names(expr: str) -> set[str]:
    """Series names a PromQL expression selects: identifiers left once strings, label matchers, ranges, grouping
    clauses and Grafana variables are gone, except functions and aggregations (followed by '(') and keywords."""
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = GROUPING.sub("", text)
    text = re.sub(r"\$\{?\w+\}?", "", text)
    names = set()
    for match in re.finditer(r"(?<![\w.])[A-Za-z_:][\w:]*", text):
        following = text[match.end():].lstrip()
        if not following.startswith("(") and match.group().lower() not in KEYWORDS:
            names.add(match.group())
    return names


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def queries(dashboard) -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel.get("targets", [])]


def test_the_helpers_find_names_and_only_names():
    expr = ('histogram_quantile(0.9, sum by (le, pod) (rate(a_bucket{namespace=~"$namespace", x="y z"}[5m]))) '
            '/ ignoring (le) b_total offset 5m and on(job) c unless label_replace(d, "e", "$1", "f", "(.+)")')
    assert metric_names(expr) == {"a_bucket", "b_total", "c", "d"}
    assert "ascend_hybrid_job_restarts_total" in operator_series()
    assert {"ascend_trainer_step_seconds_bucket", "ascend_trainer_samples_total"} <= trainer_series()
    assert exporter_series() == {"npu_chip_info_utilization", "npu_chip_info_hbm_used_memory",
                                 "npu_chip_info_hbm_total_memory"}


def test_dashboard_is_provisionable(dashboard):
    assert dashboard["uid"] == "ascend-hybrid-operator" and dashboard["title"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {variable["name"] for variable in dashboard["templating"]["list"]}
    assert {"datasource", "namespace"} <= variables
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
            assert len({target["refId"] for target in panel["targets"]}) == len(panel["targets"])


def test_every_query_names_only_series_that_exist(dashboard):
    known = operator_series() | trainer_series() | exporter_series()
    for title, expr in queries(dashboard):
        names = metric_names(expr)
        assert names, f"{title}: no series in {expr!r}"
        assert names <= known, f"{title}: unknown series {sorted(names - known)} in {expr!r}"


@pytest.mark.parametrize("wanted, source", [
    ("ascend_hybrid_jobs", operator_series), ("ascend_hybrid_job_time_to_running_seconds_bucket", operator_series),
    ("ascend_hybrid_job_restarts_total", operator_series), ("npu_chip_info_utilization", exporter_series),
    ("ascend_trainer_tokens_per_second", trainer_series)])
def test_the_required_charts_are_there(dashboard, wanted, source):
    assert wanted in source()
    assert any(wanted in metric_names(expr) for _, expr in queries(dashboard)), f"no panel charts {wanted}"


def test_per_job_panels_group_pods_by_their_job_name(dashboard):
    """Pods are <job>-a<attempt>-<index> (design §6): the exporter names them pod_name, scraped trainers pod."""
    per_job = {title: expr for title, expr in queries(dashboard) if "per job" in title}
    assert per_job
    for title, expr in per_job.items():
        assert '"(.+)-a[0-9]+-[0-9]+"' in expr and "by (namespace, ahj)" in expr, title
        label = "pod_name" if "npu_chip_info" in expr else "pod"
        assert f'"{label}", "(.+)-a[0-9]+-[0-9]+"' in expr, title
