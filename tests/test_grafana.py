"""deploy/prometheus.yml and the Grafana dashboard, run against a real Prometheus and service.

A real Prometheus (Debian's ``prometheus`` package, installed by ``deploy/setup.sh test``)
scrapes ``perceptron serve --workers 2`` on loopback with a config derived from
deploy/prometheus.yml (its target replaced by the local service, no authorization block since
auth is off here, a 1 s interval). After some traffic, every query of every panel of
deploy/grafana/dashboards/perceptron.json is run through Prometheus's HTTP API as Grafana
would run it (``$model`` and Grafana's interval variables filled in) and must return data; the
figures Prometheus read must equal the service's own counts. The provisioning files are checked
against docker-compose.yml (paths, hosts, ports) and the deploy config against ``promtool``.
"""

from __future__ import annotations

import json
import math
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import redis
import yaml

from service.cli.loopback import free_port, wait_until
from service.settings import Settings

from .rules import RULES, load_rules
from .servers import RedisServer, ServiceProcess

ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS_YML = ROOT / "deploy" / "prometheus.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "perceptron.json"
DATASOURCES = ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
PROVIDERS = ROOT / "deploy" / "grafana" / "provisioning" / "dashboards" / "perceptron.yml"
COMPOSE = ROOT / "docker-compose.yml"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
JOB = "perceptron-api"
MODEL = "grafana-test"
CLASSES = ["a", "b", "c"]
SCRAPE_S = 1
# Grafana's own variables, as Grafana fills them for a 1 s step (its $__rate_interval is at
# least four scrape intervals) and a short time range.
GRAFANA_VARS = {"__rate_interval": "5s", "__interval": "1s", "__range": "1m"}
# Panels of the Alerts row whose query has no data in a test minutes long, and why.
NEEDS_HISTORY = {
    "PerceptronMistakeRateDrift": "its baseline is the rate of 7 to 1 hours ago",
}
REDIS_MAXMEMORY = 1 << 30  # set on the test's Redis while the stack runs


# -- the files --------------------------------------------------------------------------------


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def all_panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in doc["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # panels of a collapsed row
    return out


def query_panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in all_panels(doc) if p["type"] != "row"]


def grafana_expr(expr: str, model: str, **grafana_vars: str) -> str:
    """The query Grafana sends for ``expr`` with the ``model`` variable set to ``model``."""
    values = {"model": model, **GRAFANA_VARS, **grafana_vars}

    def one(m: re.Match[str]) -> str:
        name = m[1] or m[2]
        assert name in values, f"unknown dashboard variable ${name} in {expr!r}"
        return values[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)


def scrape_job(config: dict[str, Any]) -> dict[str, Any]:
    jobs = [j for j in config["scrape_configs"] if j["job_name"] == JOB]
    assert len(jobs) == 1, f"deploy/prometheus.yml has no single job {JOB!r}"
    job: dict[str, Any] = jobs[0]
    return job


def derived_config(target: str) -> dict[str, Any]:
    """deploy/prometheus.yml for the test: the local service as target, no auth, 1 s scrapes."""
    config: dict[str, Any] = load_yaml(PROMETHEUS_YML)
    config["global"]["scrape_interval"] = f"{SCRAPE_S}s"
    config["global"]["scrape_timeout"] = f"{SCRAPE_S}s"
    config["global"]["evaluation_interval"] = f"{SCRAPE_S}s"
    job = scrape_job(config)
    for key in [k for k in job if k.endswith("_sd_configs") or k == "static_configs"]:
        del job[key]
    job.pop("authorization")
    job.pop("scrape_interval", None)
    job.pop("scrape_timeout", None)
    job["static_configs"] = [{"targets": [target]}]
    config["scrape_configs"] = [job]
    config["rule_files"] = rule_files(config)
    return config


def rule_files(config: dict[str, Any]) -> list[str]:
    """The config's rule files, as absolute paths (a relative one is read from the folder of
    the config file: deploy/)."""
    files = [str((PROMETHEUS_YML.parent / f).resolve()) for f in config.get("rule_files", [])]
    assert files == [str(RULES)], files
    return files


def compose_services() -> dict[str, Any]:
    services: dict[str, Any] = load_yaml(COMPOSE)["services"]
    return services


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Host source to container target of a compose service's bind mounts."""
    return {v.split(":")[0]: v.split(":")[1] for v in service.get("volumes", [])}


# -- a real Prometheus ------------------------------------------------------------------------


class PrometheusServer:
    """/usr/bin/prometheus on a free loopback port; stopped by its own PID."""

    def __init__(self, config: dict[str, Any], folder: Path) -> None:
        self.port = free_port()
        self.folder = folder
        self.config_file = folder / "prometheus.yml"
        self.config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        self.log_file = folder / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")[-4000:]

    def start(self) -> PrometheusServer:
        with self.log_file.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={self.config_file}",
                    f"--storage.tsdb.path={self.folder / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_until(
                lambda: httpx.get(self.url + "/-/ready", timeout=1).status_code == 200,
                timeout=20,
                what=f"prometheus on port {self.port}",
            )
        except TimeoutError:
            self.stop()
            raise AssertionError(f"prometheus did not start:\n{self.log()}") from None
        return self

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        self.proc = None

    def api(self, path: str, **params: Any) -> Any:
        r = httpx.get(self.url + path, params=params, timeout=10)
        body = r.json()
        assert r.status_code == 200 and body["status"] == "success", (path, params, body)
        return body["data"]

    def instant(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = at
        data = self.api("/api/v1/query", **params)
        assert data["resultType"] == "vector", (expr, data)
        result: list[dict[str, Any]] = data["result"]
        return result

    def value(self, expr: str) -> float:
        result = self.instant(expr)
        assert len(result) == 1, (expr, result)
        return float(result[0]["value"][1])


# -- the stack: Redis, the service with two workers, Prometheus; and some traffic -------------


@dataclass
class Stack:
    prometheus: PrometheusServer
    service: str
    started: float  # before the first request to the model
    ended: float  # after the last one
    mistakes: int  # the mistakes the service's answers reported
    feedback_requests: int
    predictions: int
    examples: int  # labelled examples: learned plus first feedback
    worker_pids: set[str]  # workers that wrote HTTP figures (multiprocess files)


def example(rng: random.Random) -> tuple[list[int], str]:
    x = [rng.randint(-3, 3) for _ in CLASSES]
    return x, CLASSES[max(range(len(CLASSES)), key=lambda i: (x[i], -i))]


def worker_pids(metrics_dir: Path) -> set[str]:
    return {p.stem.rsplit("_", 1)[1] for p in metrics_dir.glob("counter_*.db")}


@pytest.fixture(scope="module")
def stack(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    assert Path(PROMETHEUS).exists(), "prometheus is not installed: run deploy/setup.sh test"
    with redis.Redis(port=redis_server.port) as r:
        r.flushall()
        maxmemory = r.config_get("maxmemory")["maxmemory"]
        r.config_set("maxmemory", REDIS_MAXMEMORY)  # (the session's Redis: set back below)
    try:
        yield from _stack(redis_server, tmp_path_factory)
    finally:
        with redis.Redis(port=redis_server.port) as r:
            r.config_set("maxmemory", maxmemory)


def _stack(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    folder = tmp_path_factory.mktemp("grafana")
    metrics_dir = folder / "multiproc"
    service = ServiceProcess(redis_server.url, workers=2, PROMETHEUS_MULTIPROC_DIR=str(metrics_dir))
    # Prometheus first: it applies new targets only every 5 s, while the service starts.
    prometheus = PrometheusServer(derived_config(urlsplit(service.url).netloc), folder).start()
    try:
        try:
            service.start()
            wait_until(
                lambda: prometheus.value(f'up{{job="{JOB}"}}') == 1,
                timeout=20,
                what="prometheus's first scrape of the service",
            )
            yield traffic(prometheus, service.url, metrics_dir)
        finally:
            service.stop()
    finally:
        prometheus.stop()


def traffic(prometheus: PrometheusServer, url: str, metrics_dir: Path) -> Stack:
    rng = random.Random(20240607)
    started = time.time()
    mistakes = feedback_requests = predictions = examples = 0
    with httpx.Client(base_url=url, timeout=30) as c:
        r = c.put("/models/" + MODEL, json={"classes": CLASSES, "n_features": len(CLASSES)})
        assert r.status_code == 201, r.text
        for _ in range(30):  # over 3 s: several scrapes see the counters grow
            time.sleep(0.1)
            x, label = example(rng)
            r = c.post("/learn", json={"model": MODEL, "features": x, "label": label})
            assert r.status_code == 200, r.text
            mistakes += r.json()["mistake"]
            examples += 1
        # A repeated feedback (a duplicate) and one for a prediction nobody made.
        p = c.post("/predict", json={"model": MODEL, "features": [1, 0, 0]}).json()
        predictions += 1
        for _ in range(2):
            f = c.post("/feedback", json={"prediction_id": p["prediction_id"], "label": "a"})
            feedback_requests += 1
            assert f.status_code == 200, f.text
            if not f.json()["duplicate"]:
                mistakes += f.json()["mistake"]
                examples += 1
        f = c.post(
            "/feedback", json={"prediction_id": MODEL + ":NobodyMadeThisPrediction", "label": "a"}
        )
        feedback_requests += 1
        assert f.status_code >= 400, f.text
        assert c.post("/predict", json={"model": "no-such-model", "features": [1]}).is_error

    # Predictions and their feedback on new connections from a few threads at once, until both
    # workers have answered some (a bounded number of rounds): Prometheus must see their sum.
    lock = threading.Lock()
    failures: list[str] = []

    def rounds(seed: int, count: int) -> None:
        nonlocal mistakes, feedback_requests, predictions, examples
        local = random.Random(seed)
        for _ in range(count):
            time.sleep(0.1)
            with httpx.Client(base_url=url, timeout=30) as c:
                for _ in range(3):
                    x, label = example(local)
                    p = c.post("/predict", json={"model": MODEL, "features": x})
                    if p.status_code != 200:
                        failures.append(p.text)
                        continue
                    f = c.post(
                        "/feedback",
                        json={"prediction_id": p.json()["prediction_id"], "label": label},
                    )
                    with lock:
                        predictions += 1
                        feedback_requests += 1
                        if f.status_code != 200:
                            failures.append(f.text)
                            continue
                        mistakes += f.json()["mistake"]
                        examples += 1

    for batch in range(10):
        threads = [threading.Thread(target=rounds, args=(100 * batch + i, 4)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if len(worker_pids(metrics_dir)) >= 2:
            break
    assert failures == []
    ended = time.time()
    # Wait for a scrape that began after the last request.
    wait_until(
        lambda: prometheus.value(f'timestamp(up{{job="{JOB}"}})') > ended,
        timeout=15,
        what="a scrape after the traffic",
    )
    return Stack(
        prometheus, url, started, ended, mistakes, feedback_requests, predictions, examples,
        worker_pids(metrics_dir),
    )  # fmt: skip


# -- Prometheus reads what the service counted ------------------------------------------------


def test_both_workers_served_the_traffic(stack: Stack) -> None:
    assert len(stack.worker_pids) >= 2, stack.worker_pids
    assert stack.prometheus.value(f'sum(up{{job="{JOB}"}})') == 1


def test_prometheus_reads_the_services_mistake_count(stack: Stack) -> None:
    with httpx.Client(base_url=stack.service, timeout=10) as c:
        counters = c.get(f"/models/{MODEL}").json()["counters"]
    assert counters["mistakes"] == stack.mistakes
    assert counters["seen"] == stack.examples
    assert counters["predictions"] == stack.predictions
    p = stack.prometheus
    assert p.value(f'perceptron_model_mistakes_total{{model="{MODEL}"}}') == stack.mistakes
    assert p.value(f'perceptron_model_seen_total{{model="{MODEL}"}}') == stack.examples
    assert p.value(f'perceptron_model_predictions_total{{model="{MODEL}"}}') == stack.predictions
    assert p.value(f'perceptron_model_duplicates_total{{model="{MODEL}"}}') == 1
    assert p.value(f'perceptron_model_unknown_feedback_total{{model="{MODEL}"}}') == 1
    assert p.value(
        f'perceptron_model_mistake_rate{{model="{MODEL}", window="all"}}'
    ) == pytest.approx(stack.mistakes / stack.examples)
    # The HTTP figures are every worker's together: all the /feedback requests are counted.
    assert p.value('sum(perceptron_http_requests_total{route="/feedback"})') == (
        stack.feedback_requests
    )
    assert p.value(
        'sum(perceptron_http_request_duration_seconds_count{route="/feedback", method="POST"})'
    ) == (stack.feedback_requests)


def test_the_model_variable_lists_the_model(stack: Stack) -> None:
    variable = next(v for v in dashboard()["templating"]["list"] if v["name"] == "model")
    query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
    m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", query)
    assert m is not None, query
    values = stack.prometheus.api(f"/api/v1/label/{m[2]}/values", **{"match[]": m[1]})
    assert MODEL in values


def test_every_panel_query_returns_data(stack: Stack) -> None:
    """Each target of each panel, as Grafana would run it, returns series with numbers."""
    p = stack.prometheus
    now = time.time()
    empty = []
    for panel in query_panels(dashboard()):
        for target in panel["targets"]:
            expr = grafana_expr(target["expr"], MODEL)
            if target.get("instant"):
                series = [[s["value"]] for s in p.instant(expr, at=now)]
            else:
                data = p.api(
                    "/api/v1/query_range",
                    query=expr,
                    start=stack.started - 2,
                    end=now,
                    step=f"{SCRAPE_S}s",
                )
                assert data["resultType"] == "matrix"
                series = [s["values"] for s in data["result"]]
            numbers = [float(v) for points in series for _, v in points]
            if not any(math.isfinite(v) for v in numbers):
                empty.append(f"{panel['title']} [{target['refId']}]: {expr}")
    expected = [e for e in empty if e.split(":")[0] in NEEDS_HISTORY]
    assert len(expected) == len(NEEDS_HISTORY), expected  # each of those ran, without data
    assert [e for e in empty if e not in expected] == [], "panels without data:\n" + "\n".join(
        empty
    )


def test_panels_show_the_right_numbers(stack: Stack) -> None:
    """Some panels' own queries, checked against what the traffic did."""
    p = stack.prometheus
    # Rates over all of the traffic, read now.
    window = f"{int(time.time() - stack.started) + 5}s"
    targets = {
        (panel["title"], t["refId"]): grafana_expr(t["expr"], MODEL, __rate_interval=window)
        for panel in query_panels(dashboard())
        for t in panel["targets"]
    }
    assert p.value(targets[("Mistakes", "A")]) == stack.mistakes
    assert p.value(targets[("Labelled examples", "A")]) == stack.examples
    assert p.value(targets[("Cumulative mistake rate", "A")]) == pytest.approx(
        stack.mistakes / stack.examples
    )
    cells = p.instant(targets[("Confusion matrix", "A")])
    assert {c["metric"]["true"] for c in cells} <= set(CLASSES)
    assert sum(float(c["value"][1]) for c in cells) == stack.examples
    windows = {s["metric"]["window"] for s in p.instant(targets[("Mistake rate by window", "A")])}
    assert windows == {"all", "100", "1000", "without_defaults"}  # (the last: labels that came)
    # No request failed with a 5xx: the error rate of every route is 0. A route with no
    # request inside the rate window reads NaN (0 of 0), which depends on when the query runs
    # after the traffic: allowed, as long as some route shows its 0.
    errors = {
        s["metric"]["route"]: float(s["value"][1])
        for s in p.instant(targets[("Error rate (5xx) by route", "A")])
    }
    rates = [errors[r] for r in ("/learn", "/predict", "/feedback")]
    assert all(r == 0 or math.isnan(r) for r in rates), errors
    assert 0 in rates, errors
    assert not any(v > 0 for v in errors.values()), errors


def test_prometheus_reads_the_serving_figures(stack: Stack, redis_server: RedisServer) -> None:
    p = stack.prometheus
    assert p.value(f'perceptron_ready{{job="{JOB}"}}') == 1
    (memory,) = p.instant("perceptron_redis_maxmemory_bytes")
    assert memory["metric"]["node"] == f"127.0.0.1:{redis_server.port}"
    assert float(memory["value"][1]) == REDIS_MAXMEMORY
    assert 0 < p.value("perceptron_redis_memory_used_bytes") < REDIS_MAXMEMORY
    # Every prediction of the traffic got its feedback: none is pending.
    assert p.value(f'perceptron_model_pending_bytes{{model="{MODEL}"}}') == 0
    assert p.value(f'perceptron_model_pending_max_bytes{{model="{MODEL}"}}') == (
        Settings.model_fields["max_pending_bytes"].default
    )


def alert_rules(prometheus: PrometheusServer) -> dict[str, dict[str, Any]]:
    groups = prometheus.api("/api/v1/rules", type="alert")["groups"]
    return {r["name"]: r for g in groups for r in g["rules"]}


def test_prometheus_loads_every_alert_rule_and_a_healthy_service_fires_none(
    stack: Stack,
) -> None:
    """deploy/prometheus.yml's rule_files: Prometheus evaluates each rule of
    deploy/alerts.yml on the live series without an error, and none is pending or firing."""
    names = {r.name for r in load_rules()}
    assert set(alert_rules(stack.prometheus)) == names

    def evaluated_since_the_traffic() -> bool:
        return all(
            datetime.fromisoformat(r["lastEvaluation"]).timestamp() > stack.ended
            for r in alert_rules(stack.prometheus).values()
        )

    wait_until(evaluated_since_the_traffic, timeout=15, what="the rules' evaluation")
    for name, rule in alert_rules(stack.prometheus).items():
        assert rule["health"] == "ok", (name, rule.get("lastError"))
        assert rule["state"] == "inactive" and rule["alerts"] == [], (name, rule["alerts"])


# -- the files agree with each other and with docker-compose.yml ------------------------------


def test_dashboard_is_valid_grafana_json() -> None:
    doc = dashboard()
    assert 36 <= doc["schemaVersion"] <= 41
    assert doc["uid"] and doc["title"]
    names = [v["name"] for v in doc["templating"]["list"]]
    assert "model" in names
    model = doc["templating"]["list"][names.index("model")]
    assert model["type"] == "query"
    assert model["definition"] == "label_values(perceptron_model_seen_total, model)"
    panels = all_panels(doc)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["h"] > 0 and g["x"] + g["w"] <= 24, p["title"]
        area = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not area & cells, f"panel {p['title']!r} overlaps another"
        cells |= area
    kinds = set()
    for p in query_panels(doc):
        kinds.add(p["type"])
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["expr"].strip(), p["title"]
            assert t.get("datasource", p["datasource"])["type"] == "prometheus"
        assert p["datasource"]["uid"] in ("${datasource}", "prometheus"), p["title"]
    assert {"timeseries", "stat", "table"} <= kinds
    exprs = " ".join(t["expr"] for p in query_panels(doc) for t in p["targets"])
    for metric in (
        "perceptron_model_mistakes_total", "perceptron_model_seen_total",
        "perceptron_model_predictions_total", "perceptron_model_feedback_total",
        "perceptron_model_updates_total", "perceptron_model_mistake_rate",
        "perceptron_model_confusion_total", "perceptron_http_requests_total",
        "perceptron_http_request_duration_seconds_bucket",
    ):  # fmt: skip
        assert metric in exprs, f"no panel shows {metric}"
    assert 'status=~"5.."' in exprs and "histogram_quantile(0.99" in exprs


def _squeezed(expr: str) -> str:
    return re.sub(r"\s+", "", expr)


ALERTS_ROW = "Alerts"


def row_panels(doc: dict[str, Any], title: str) -> list[dict[str, Any]]:
    """The panels of the row whose title starts with ``title`` (in the dashboard's order, a
    row's panels follow it until the next row; a collapsed row holds its own)."""
    out: list[dict[str, Any]] = []
    inside = False
    for p in doc["panels"]:
        if p["type"] == "row":
            inside = p["title"].startswith(title)
            out.extend(p.get("panels", []) if inside else [])
        elif inside:
            out.append(p)
    return out


COMPARED = re.compile(r"^\)*(==|!=|>=|<=|>|<)(-?\d+(?:\.\d+)?)")


def test_every_alert_rule_has_its_panel() -> None:
    """Each rule of deploy/alerts.yml has a panel in the Alerts row, titled after it, whose
    first query is the part of the rule's expression it compares with its threshold, drawn
    as the panel's threshold."""
    titled = {p["title"].split(":")[0]: p for p in row_panels(dashboard(), ALERTS_ROW)}
    rules = load_rules()
    assert set(titled) == {r.name for r in rules}, "the Alerts row and the rules differ"
    for rule in rules:
        panel = titled[rule.name]
        drawn = _squeezed(panel["targets"][0]["expr"])
        compared = _squeezed(rule.expr)
        assert drawn in compared, f"{rule.name}: its panel draws {drawn!r}"
        m = COMPARED.match(compared[compared.index(drawn) + len(drawn) :])
        assert m is not None, f"{rule.name}: {drawn!r} is not what it compares"
        steps = [s["value"] for s in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]]
        assert float(m[2]) in steps, (rule.name, m[0], steps)
        assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] != "off"


def test_the_panel_check_catches_a_missing_or_wrong_panel() -> None:
    """A rule without its panel, or a panel whose threshold is not the rule's, fails
    test_every_alert_rule_has_its_panel."""
    original = dashboard()
    for broken in ("no panel", "threshold"):
        doc = json.loads(json.dumps(original))
        panels = [p for p in query_panels(doc) if p["title"].startswith("PerceptronPendingNear")]
        if broken == "no panel":
            doc["panels"] = [p for p in doc["panels"] if p not in panels]
        else:
            panels[0]["fieldConfig"]["defaults"]["thresholds"]["steps"][-1]["value"] = 0.7
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sys.modules[__name__], "dashboard", lambda d=doc: d)
            with pytest.raises(AssertionError):
                test_every_alert_rule_has_its_panel()


def test_provisioning_points_where_compose_mounts_things() -> None:
    services = compose_services()
    grafana, prometheus = services["grafana"], services["prometheus"]
    # The data source is the compose prometheus service on the port it listens on.
    (source,) = load_yaml(DATASOURCES)["datasources"]
    url = urlsplit(source["url"])
    assert url.hostname in services and url.hostname == "prometheus"
    published = [str(p).rsplit(":", 1)[1] for p in prometheus["ports"]]
    assert [str(url.port)] == published
    assert source["type"] == "prometheus" and source["isDefault"] is True
    # The dashboard provider reads the folder compose mounts deploy/grafana/dashboards at.
    (provider,) = load_yaml(PROVIDERS)["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == mounts(grafana)["./deploy/grafana/dashboards"]
    assert mounts(grafana)["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    assert DASHBOARD.parent.name == "dashboards"
    # Prometheus reads this file, and scrapes each api replica on the port it serves.
    assert (
        f"--config.file={mounts(prometheus)['./deploy/prometheus.yml']}" in (prometheus["command"])
    )
    job = scrape_job(load_yaml(PROMETHEUS_YML))
    (sd,) = job["dns_sd_configs"]
    assert sd["names"] == ["api"] and "api" in services
    assert [str(sd["port"])] == [str(p) for p in services["api"]["expose"]]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    # Its key is the compose secret mounted into prometheus (and nowhere else).
    assert job["authorization"] == {
        "type": "Bearer",
        "credentials_file": "/run/secrets/prometheus_api_key",
    }
    assert prometheus["secrets"] == ["prometheus_api_key"]
    assert [n for n, s in services.items() if "prometheus_api_key" in s.get("secrets", [])] == [
        "prometheus"
    ]
    assert (
        load_yaml(PROMETHEUS_YML)["global"]["scrape_interval"] == source["jsonData"]["timeInterval"]
    )
    # The dashboard's up{job=...} names this job.
    assert f'job="{JOB}"' in DASHBOARD.read_text().replace('\\"', '"')


@pytest.mark.servers  # runs promtool
def test_promtool_accepts_the_configs(tmp_path: Path) -> None:
    """deploy/prometheus.yml as is (the key file put where promtool can see one) and the test's."""
    key = tmp_path / "api_key"
    key.write_text("k" * 32)
    deploy = load_yaml(PROMETHEUS_YML)
    scrape_job(deploy)["authorization"]["credentials_file"] = str(key)
    deploy["rule_files"] = rule_files(deploy)
    for name, config in (("deploy", deploy), ("test", derived_config("127.0.0.1:8000"))):
        path = tmp_path / f"{name}.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        r = subprocess.run(
            [PROMTOOL, "check", "config", str(path)], capture_output=True, text=True, timeout=30
        )
        assert r.returncode == 0, (name, r.stdout, r.stderr)
