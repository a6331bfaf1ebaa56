"""deploy/alerts.yml read for the tests: its rules, the metric names and labels each one's
PromQL reads, and the numbers it compares with (its thresholds)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "alerts.test.yml"
PROMTOOL = "/usr/bin/promtool"

# PromQL words that are not metric names (operators, modifiers).
KEYWORDS = {"and", "or", "unless", "offset", "bool", "by", "without", "on", "ignoring"}
LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
SELECTOR = re.compile(r"([a-zA-Z_:][\w:]*)\s*\{([^}]*)\}")
MATCHER = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*\"(?:[^\"\\]|\\.)*\"")
# A comparison with a number (a threshold, or a guard such as ``maxmemory > 0``).
COMPARISON = re.compile(r"(==|!=|>=|<=|>|<)\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?![\w.])")


@dataclass(frozen=True)
class Rule:
    name: str
    expr: str
    raw: dict[str, Any]

    @property
    def metrics(self) -> set[str]:
        return metric_names(self.expr)

    @property
    def comparisons(self) -> list[re.Match[str]]:
        """Every comparison of the expression with a number: its threshold and its guards."""
        return list(COMPARISON.finditer(self.expr))

    @property
    def grouped_by(self) -> set[str]:
        """The labels the expression keeps by name (``by (...)``)."""
        return {
            label.strip()
            for m in re.finditer(r"\bby\s*\(([^)]*)\)", self.expr)
            for label in m[1].split(",")
        }


def load_rules(path: Path = RULES) -> list[Rule]:
    doc = yaml.safe_load(path.read_text())
    return [
        Rule(r["alert"], r["expr"], r)
        for group in doc["groups"]
        for r in group["rules"]
        if "alert" in r
    ]


def _strip(expr: str) -> str:
    """The expression without its strings, label matchers, label lists and ranges."""
    expr = SELECTOR.sub(lambda m: m[1], expr)
    expr = re.sub(r"\"(?:[^\"\\]|\\.)*\"", "", expr)
    expr = LABEL_LISTS.sub("", expr)
    return re.sub(r"\[[^\]]*\]", "", expr)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads.

    >>> sorted(metric_names('max by (model) (rate(a_total{w="1"}[5m] offset 1h)) / b > 0'))
    ['a_total', 'b']
    """
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][\w:]*)\s*(\()?", _strip(expr)):
        if m[2] is None and m[1] not in KEYWORDS:
            names.add(m[1])
    return names


def matchers(expr: str) -> set[tuple[str, str]]:
    """(metric, label) of every label matcher of the expression's selectors."""
    return {(m[1], label[1]) for m in SELECTOR.finditer(expr) for label in MATCHER.finditer(m[2])}
