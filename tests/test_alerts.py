"""deploy/alerts.yml: promtool accepts it, its unit tests (deploy/alerts.test.yml) pass and pin
every threshold, each rule is written for an operator, and every metric and label it reads is
one the service exports.

``promtool`` comes with Debian's ``prometheus`` package, which ``deploy/setup.sh test``
installs; these tests fail without it.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from service.settings import Settings

from .inprocess import InProcessService
from .rules import PROMTOOL, ROOT, RULE_TESTS, RULES, Rule, load_rules, matchers

SEVERITIES = {"warning", "critical"}
# Labels Prometheus adds to every series it scrapes, beside the service's own.
TARGET_LABELS = {"job", "instance"}
# Metrics Prometheus makes itself for each target.
PROMETHEUS_OWN = {"up"}
UP = (False, True)


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    assert Path(PROMTOOL).exists(), "promtool is not installed: run deploy/setup.sh test"
    return subprocess.run([PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def rules() -> list[Rule]:
    return load_rules()


# -- promtool ------------------------------------------------------------------------------------


@pytest.mark.servers  # runs promtool
def test_promtool_accepts_the_rules(rules: list[Rule]) -> None:
    r = promtool("check", "rules", RULES)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(rules)} rules found" in r.stdout, r.stdout


@pytest.mark.servers
def test_the_rules_pass_their_unit_tests() -> None:
    r = promtool("test", "rules", RULE_TESTS)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout, r.stdout


def _unit_tests_pass_with(rule: dict[str, Any], folder: Path) -> bool:
    """Whether the unit tests of ``rule``'s alert (those of deploy/alerts.test.yml that
    evaluate it) pass with ``rule`` alone in the rules file."""
    (folder / RULES.name).write_text(
        yaml.safe_dump({"groups": [{"name": "one", "rules": [rule]}]}, sort_keys=False)
    )
    doc = yaml.safe_load(RULE_TESTS.read_text())
    tests = []
    for test in doc["tests"]:
        cases = [c for c in test["alert_rule_test"] if c["alertname"] == rule["alert"]]
        if cases:
            tests.append({**test, "alert_rule_test": cases})
    assert tests, f"no unit test of {rule['alert']}"
    (folder / RULE_TESTS.name).write_text(yaml.safe_dump({**doc, "tests": tests}))
    return promtool("test", "rules", folder / RULE_TESTS.name).returncode == 0


def _nudged(rule: Rule, comparison: re.Match[str], up: bool) -> dict[str, Any]:
    """``rule`` with the number of ``comparison`` moved a hair (0.5 %, or 0.005 from 0)."""
    number = float(comparison[2])
    step = abs(number) * 0.005 or 0.005
    start, end = comparison.span(2)
    moved = repr(number + step if up else number - step)
    return {**rule.raw, "expr": rule.expr[:start] + moved + rule.expr[end:]}


@pytest.mark.servers
def test_the_unit_tests_pin_every_threshold(rules: list[Rule], tmp_path: Path) -> None:
    """Each number a rule compares with, moved a hair up or down, fails the rule's unit tests
    in at least one direction: they test it at its edge, not somewhere well past it."""
    loose = []
    for rule in rules:
        assert _unit_tests_pass_with(rule.raw, tmp_path), rule.name  # as shipped: they pass
        for comparison in rule.comparisons:
            if all(_unit_tests_pass_with(_nudged(rule, comparison, up), tmp_path) for up in UP):
                loose.append(f"{rule.name}: {comparison[0]}")
    assert loose == [], "thresholds no unit test pins: " + ", ".join(loose)


def test_every_rule_is_tested_firing_and_quiet(rules: list[Rule]) -> None:
    """Each rule has a unit test where it fires and one where nothing fires; the first
    also shows that the series beside it, at the threshold, do not."""
    doc = yaml.safe_load(RULE_TESTS.read_text())
    assert doc["rule_files"] == [RULES.name]
    firing: set[str] = set()
    quiet: set[str] = set()
    for test in doc["tests"]:
        for case in test["alert_rule_test"]:
            (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = {r.name for r in rules}
    assert firing >= names, f"never shown firing: {sorted(names - firing)}"
    assert quiet >= names, f"never shown quiet: {sorted(names - quiet)}"


# -- each rule as an operator reads it -----------------------------------------------------------


def test_every_rule_waits_is_graded_and_says_what_to_check(rules: list[Rule]) -> None:
    assert len({r.name for r in rules}) == len(rules)
    for rule in rules:
        raw = rule.raw
        assert rule.name.startswith("Perceptron"), rule.name
        assert raw.get("for"), f"{rule.name} fires on a single evaluation"
        assert raw["labels"]["severity"] in SEVERITIES, rule.name
        notes = raw["annotations"]
        assert set(notes) == {"summary", "description"}, rule.name
        assert len(notes["description"]) > len(notes["summary"]) > 10, rule.name
        assert "Check" in notes["description"] or "check" in notes["description"], rule.name
        # It names what it is about: the model, replica or Redis node its expression keeps.
        about = rule.grouped_by & {"model", "instance", "node"}
        if not about and "sum(" not in rule.expr:  # not aggregated: every label is kept
            about = {"instance"}
        for label in about:
            assert f"{{{{ $labels.{label} }}}}" in notes["summary"], (rule.name, label)
        assert rule.comparisons, f"{rule.name} compares with no threshold"


# -- every name a rule reads is one the service exports ------------------------------------------


@pytest.fixture(scope="module")
def exported() -> Iterator[dict[str, set[str]]]:
    """Every sample name of /metrics, with its labels, from a service in-process that served
    every kind of figure: a model with predictions, feedback and learned examples and a
    challenger, an error
    answer, and a store that reports its memory."""
    service = InProcessService(
        Settings(auth=False, default_model=False), fakeredis.FakeServer(version=(7, 0)),
        embedded=False,
    ).start()  # fmt: skip
    service.redis_info.update(maxmemory=1 << 30, used_memory=1 << 20)
    try:
        api = service.client()
        api.put("/models/m", json={"classes": ["a", "b"], "n_features": 2})
        api.put("/models/m/challengers/c", json={"algorithm": "pa1"})
        api.post("/learn", json={"model": "m", "features": [1, 0], "label": "a"})
        p = api.post("/predict", json={"model": "m", "features": [0, 1]}).json()
        api.post("/feedback", json={"prediction_id": p["prediction_id"], "label": "b"})
        api.post("/predict", json={"model": "m", "features": [0, 1]})
        api.post("/predict", json={"model": "none", "features": [0, 1]})
        text = api.get("/metrics").text
    finally:
        service.stop()
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            names.setdefault(s.name, set()).update(s.labels)
    yield names


def test_rules_read_only_metrics_the_service_exports(
    rules: list[Rule], exported: dict[str, set[str]]
) -> None:
    read = {name for rule in rules for name in rule.metrics}
    assert {"perceptron_ready", "perceptron_model_mistake_rate"} <= read  # the check sees them
    unknown = read - set(exported) - PROMETHEUS_OWN
    assert unknown == set(), f"the rules read metrics /metrics does not export: {unknown}"


def test_rules_match_only_labels_the_series_have(
    rules: list[Rule], exported: dict[str, set[str]]
) -> None:
    for rule in rules:
        for metric, label in matchers(rule.expr):
            has = exported.get(metric, set()) | TARGET_LABELS
            assert label in has, f"{rule.name}: {metric} has no label {label!r}"
        for label in rule.grouped_by:
            assert any(label in exported.get(m, set()) | TARGET_LABELS for m in rule.metrics), (
                f"{rule.name}: no series it reads has the label {label!r}"
            )


def test_the_names_check_catches_a_rename(exported: dict[str, set[str]]) -> None:
    renamed = Rule("X", 'max by (model) (perceptron_model_pending_byte{model!=""}) > 1', {})
    assert renamed.metrics - set(exported) == {"perceptron_model_pending_byte"}
    relabelled = Rule("X", 'perceptron_model_mistake_rate{windows="1000"} > 1', {})
    ((metric, label),) = matchers(relabelled.expr)
    assert label not in exported[metric]


def test_the_pending_rule_applies_with_the_default_cap(exported: dict[str, set[str]]) -> None:
    # The rule skips a cap of 0 (no limit); the setting's default is a limit.
    assert Settings.model_fields["max_pending_bytes"].default > 0
    assert "model" in exported["perceptron_model_pending_max_bytes"]


# -- deploy/MONITORING.md lists them ---------------------------------------------------------------

MONITORING = ROOT / "deploy" / "MONITORING.md"
HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


def _documented(heading: str) -> set[str]:
    """The names in the first column of the table under ``heading`` in MONITORING.md."""
    section = MONITORING.read_text().split(heading, 1)[1]
    return set(re.findall(r"^\| `([\w]+)` \|", section.split("\n## ", 1)[0], re.M))


def test_monitoring_md_lists_every_metric_exported(exported: dict[str, set[str]]) -> None:
    families = {
        next((n[: -len(p)] for p in HISTOGRAM_PARTS if n.endswith(p)), n)
        for n in exported
        # the service's own: not prometheus-client's process and Python figures (only
        # outside multiprocess mode) nor the time each series began (_created)
        if n.startswith("perceptron_") and not n.endswith("_created")
    }
    listed = _documented("## `GET /metrics`")
    assert "perceptron_http_request_duration_seconds" in families
    assert families == listed, (sorted(families - listed), sorted(listed - families))


def test_monitoring_md_lists_every_rule(rules: list[Rule]) -> None:
    listed = _documented("## Alerts (`deploy/alerts.yml`)")
    assert listed == {r.name for r in rules}
    for rule in rules:
        assert f"| {rule.raw['for']} | {rule.raw['labels']['severity']} |" in (
            MONITORING.read_text()
        ), rule.name
