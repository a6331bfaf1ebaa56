"""The dashboard in a real headless Chromium: it shows what the JSON API reports.

Debian's ``chromium`` is driven by Playwright (deploy/setup.sh test installs both; Playwright's
own browser download is never used). Every request the page makes to anything but the service
under test is aborted, and fails the test. Screenshots of the filled page go to artifacts/:
dashboard.png, and the README's demo, a three-class model at 1280 px and on a phone
(dashboard-demo.png, dashboard-1280.png, dashboard-phone.png). The page writes numbers and
times in the browser's locale and time zone: en-US and UTC here, unless a test names another
locale.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from playwright.sync_api import (
    BrowserContext,
    Locator,
    Page,
    Playwright,
    Request,
    Route,
    ViewportSize,
    expect,
    sync_playwright,
)
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

from service.cli.loopback import wait_until

from .conftest import MakeService
from .inprocess import Clock

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
API = re.compile(r"/(models(/[^?#]*)?|learners)([?#].*)?$")
DESKTOP: ViewportSize = {"width": 1280, "height": 900}
PHONE: ViewportSize = {"width": 390, "height": 844}


@pytest.fixture
def client(make_service: MakeService) -> httpx.Client:
    """The service with 1 s buckets, so a few seconds of replay draw several chart points."""
    return make_service(series_bucket_s=1)


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture
def locale() -> str:
    """The browser's locale; a test may name another (``@pytest.mark.parametrize``)."""
    return "en-US"


@pytest.fixture
def browser(playwright: Playwright, tmp_path: Path, locale: str) -> Iterator[BrowserContext]:
    """Chromium with a fresh profile (so a fresh localStorage) for each test, in ``locale``
    and the UTC time zone."""
    context = playwright.chromium.launch_persistent_context(
        str(tmp_path / "chromium-profile"),
        executable_path=CHROMIUM,
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": 1440, "height": 900},
        locale=locale,
        timezone_id="UTC",
    )
    yield context
    context.close()


@pytest.fixture
def page(browser: BrowserContext) -> Iterator[Page]:
    page = browser.pages[0] if browser.pages else browser.new_page()
    page.set_default_timeout(10_000)
    expect.set_options(timeout=10_000)  # the page refreshes every 2 s
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    # The service's Content-Security-Policy must not block any part of its own page.
    page.on(
        "console",
        lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None,
    )
    yield page
    assert errors == [], f"the page raised: {errors}"


def pct(rate: float | None) -> str:
    """The page's percentage in en-US: Intl.NumberFormat rounds the decimal a number prints
    as (its shortest, Python's repr), half away from zero; one place, two under 1%."""
    if rate is None:
        return "—"
    p = Decimal(repr(rate)).scaleb(2)
    if p == 0:
        return "0%"
    places = Decimal("0.01") if p < 1 else Decimal("0.1")
    return f"{p.quantize(places, rounding=ROUND_HALF_UP)}%"


def trend(m: dict[str, Any]) -> tuple[str, float | None]:
    """The headline's rule: the first examples on the learning curve against the last 100."""
    seen, recent, points = (
        m["counters"]["seen"],
        m["mistake_rate"]["last_100"],
        m["curve"]["points"],
    )
    if not seen:
        return "none", None
    target = min(100, seen // 3)
    first = next((p for p in points if p["examples"] >= target), None)
    if seen < 20 or first is None or first["examples"] >= seen:
        return "early", None
    rate = first["rate"]
    if recent <= rate * 0.8 and rate - recent >= 0.01:
        return "falling", rate
    if recent >= rate * 1.25 and recent - rate >= 0.01:
        return "rising", rate
    return ("low" if recent <= 0.02 else "flat"), rate


def base(client: httpx.Client) -> str:
    return str(client.base_url).rstrip("/")


def only_the_service(page: Page, client: httpx.Client) -> list[str]:
    """Abort every request of the page that is not to the service under test; the URLs of
    those aborted are listed in the list returned (the tests expect it empty)."""
    service = base(client) + "/"
    aborted: list[str] = []

    def guard(route: Route) -> None:
        url = route.request.url
        if url.startswith(service) or url.startswith("data:"):
            route.continue_()
        else:
            aborted.append(url)
            route.abort()

    page.route("**/*", guard)
    return aborted


def next_bucket(clock: Clock) -> None:
    """Move the service's clock into the next 1 s bucket of the time series."""
    clock.advance(1.0 - clock() % 1.0 + 0.02)


def vertices(page: Page, selector: str) -> int:
    points = page.locator(selector).get_attribute("points") or ""
    return len(points.split())


def test_dashboard_shows_what_the_api_reports(
    client: httpx.Client, page: Page, clock: Clock
) -> None:
    features, labels = load_breast_cancer(return_X_y=True)
    order = np.random.default_rng(7).permutation(len(labels))
    xs = StandardScaler().fit_transform(features)[order].round(6)
    ys = labels[order]
    spec = {"classes": [0, 1], "n_features": 30}
    assert client.put("/models/cancer", json=spec).status_code == 201
    aborted = only_the_service(page, client)

    page.goto(f"{base(client)}/dashboard#model=cancer")
    expect(page.locator("#model-view")).to_have_attribute("data-model", "cancer")
    expect(page.locator("#headline")).to_have_attribute("data-trend", "none")
    expect(page.locator("#headline-text")).to_have_text("No feedback yet")
    expect(page.locator("#chart-time")).to_have_attribute("data-points", "0")

    # The replay: four batches to /learn/batch, then predictions with their feedback, each
    # phase in its own bucket; the page follows live.
    learned = 480
    for chunk in np.array_split(np.arange(learned), 4):
        next_bucket(clock)
        body = {"model": "cancer", "features": xs[chunk].tolist(), "labels": ys[chunk].tolist()}
        assert client.post("/learn/batch", json=body).status_code == 200
    next_bucket(clock)
    for i in range(learned, len(ys)):
        p = client.post("/predict", json={"model": "cancer", "features": xs[i].tolist()})
        f = client.post(
            "/feedback", json={"prediction_id": p.json()["prediction_id"], "label": int(ys[i])}
        )
        assert f.status_code == 200

    m = client.get("/models/cancer/metrics").json()
    points = m["series"]["points"]
    counters = m["counters"]
    assert counters["seen"] == len(ys) and counters["feedback"] == len(ys) - learned
    assert len(points) >= 5
    expect(page.locator("#counter-seen")).to_have_attribute("data-value", str(len(ys)))

    # Numbers: the same as the JSON API's.
    for name, value in counters.items():
        expect(page.locator(f"#counter-{name}")).to_have_text(f"{value:,}")
    # A counter that warns (protocol.COUNTERS) is marked once above zero, and only then.
    expect(page.locator("#counter-unknown_feedback")).to_have_attribute("data-tone", "")
    gone = {"prediction_id": "cancer:AAAAAAAAAAAAAAAAAAAA", "label": 1}
    assert client.post("/feedback", json=gone).status_code == 404
    expect(page.locator("#counter-unknown_feedback")).to_have_attribute("data-tone", "warn")
    expect(page.locator("#counter-conflicts")).to_have_attribute("data-tone", "")
    expect(page.locator("#counter-mistakes")).to_have_attribute("data-tone", "")
    counters["unknown_feedback"] += 1
    expect(page.locator("#version")).to_have_text(f"{m['version']:,}")
    assert m["version"] > 0
    for key, element in [
        ("cumulative", "#rate-cumulative"),
        ("last_100", "#rate-last-100"),
        ("last_1000", "#rate-last-1000"),
    ]:
        rate = m["mistake_rate"][key]
        expect(page.locator(element)).to_have_text(pct(rate))
        assert float(page.locator(element).get_attribute("data-value") or "nan") == rate
    assert (
        float(page.locator("#weight-norm").get_attribute("data-value") or "0") == m["weight_norm"]
    )
    r = float(page.locator("#max-feature-norm").get_attribute("data-value") or "0")
    assert r == m["max_feature_norm"]

    # The confusion matrix, cell by cell.
    assert m["confusion"]["labels"] == [0, 1]
    for i, row in enumerate(m["confusion"]["matrix"]):
        for j, count in enumerate(row):
            cell = page.locator(f"#cm-{i}-{j}")
            expect(cell).to_have_attribute("data-count", str(count))
            expect(cell.locator(".n")).to_have_text(f"{count:,}")
            assert cell.get_attribute("data-true") == str(i)
            assert cell.get_attribute("data-served") == str(j)
    assert sum(map(sum, m["confusion"]["matrix"])) == counters["seen"]

    # The mistake bound: labelled an estimate, with its value or the reason it has none.
    bound = m["mistake_bound"]
    expect(page.locator("#bound .badge")).to_have_text("estimate")
    expect(page.locator("#bound")).to_have_attribute("data-applies", "true")
    expect(page.locator("#bound-mistakes")).to_have_text(f"{counters['mistakes']:,}")
    if bound["separable"]:
        assert (
            float(page.locator("#bound-value").get_attribute("data-value") or "0") == bound["bound"]
        )
        expect(page.locator("#bound-value")).to_contain_text("mistakes")
    else:
        expect(page.locator("#bound-value")).to_have_text(
            re.compile("no finite bound|no margin yet")
        )

    # The time chart drew one point per bucket of the series, the other one per point of the
    # learning curve (569 examples: one every 8), and the rate over the last 104 from 104 on.
    n = len(points)
    expect(page.locator("#chart-time")).to_have_attribute("data-points", str(n))
    expect(page.locator("#chart-time .series-bucket circle.pt")).to_have_count(n)
    assert vertices(page, "#chart-time .series-cumulative polyline") == n
    curve = m["curve"]
    assert curve["every"] == 8 and len(curve["points"]) == len(ys) // 8
    c = len(curve["points"])
    expect(page.locator("#chart-examples")).to_have_attribute("data-points", str(c))
    assert vertices(page, "#chart-examples .series-running polyline") == c
    expect(page.locator("#chart-examples .series-running circle.pt")).to_have_count(0)
    expect(page.locator("#chart-examples .series-window circle.pt")).to_have_count(c - 12)
    expect(page.locator("#window-legend")).to_have_text("last 104 examples")
    expect(page.locator("#running-legend")).to_have_text(
        "cumulative: mistakes so far / examples so far"
    )

    # The headline says at a glance whether the model learns.
    expected, first = trend(m)
    assert expected == "falling"  # a perceptron on this data set does learn
    headline = page.locator("#headline")
    expect(headline).to_have_attribute("data-trend", expected)
    expect(page.locator("#headline-text")).to_have_text(
        f"Learning: mistake rate falling from {pct(first)} to {pct(m['mistake_rate']['last_100'])}"
    )

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

    assert aborted == []  # nothing was asked of anything but the service

    # The selector switches models and remembers the choice in the address.
    select = page.locator("#model-select")
    assert select.locator("option").all_inner_texts() == ["cancer", "default"]
    select.select_option("default")
    expect(page).to_have_url(re.compile(r"/dashboard#model=default$"))
    expect(page.locator("#model-view")).to_have_attribute("data-model", "default")
    expect(page.locator("#counter-seen")).to_have_text("0")
    expect(page.locator("#rate-last-100")).to_have_text("—")
    page.go_back()
    expect(page.locator("#model-view")).to_have_attribute("data-model", "cancer")
    expect(select).to_have_value("cancer")
    expect(page.locator("#counter-seen")).to_have_text(f"{len(ys):,}")


def test_empty_states(make_service: MakeService, page: Page) -> None:
    client = make_service(default_model=False)
    aborted = only_the_service(page, client)
    page.goto(f"{base(client)}/dashboard")
    expect(page.locator("#empty")).to_be_visible()
    expect(page.locator("#empty")).to_contain_text("No models yet")
    expect(page.locator("#model-view")).to_be_hidden()

    assert client.put("/models/fresh", json={"n_features": 2}).status_code == 201
    expect(page.locator("#model-view")).to_have_attribute("data-model", "fresh")  # live
    expect(page.locator("#empty")).to_be_hidden()
    expect(page).to_have_url(re.compile(r"/dashboard#model=fresh$"))
    expect(page.locator("#headline-text")).to_have_text("No feedback yet")
    for element in ["#rate-last-100", "#rate-last-1000", "#rate-cumulative"]:
        expect(page.locator(element)).to_have_text("—")
    for chart in ["#chart-time", "#chart-examples"]:
        expect(page.locator(chart)).to_have_attribute("data-points", "0")
        expect(page.locator(f"{chart} text.empty-text")).to_have_text("No labelled examples yet")
    expect(page.locator("#bound-value")).to_have_text("no margin yet")

    body = {"model": "fresh", "features": [[1, 2], [-1, -2], [2, 1]], "labels": [1, -1, 1]}
    assert client.post("/learn/batch", json=body).status_code == 200
    expect(page.locator("#headline")).to_have_attribute("data-trend", "early")
    expect(page.locator("#counter-seen")).to_have_text("3")
    expect(page.locator("#chart-time")).to_have_attribute("data-points", "1")
    expect(page.locator("#chart-examples")).to_have_attribute("data-points", "3")
    assert aborted == []


def test_a_key_in_the_address_fragment_is_sent_and_kept(client: httpx.Client, page: Page) -> None:
    fetches: list[Request] = []
    page.on("request", lambda r: fetches.append(r) if r.resource_type == "fetch" else None)
    aborted = only_the_service(page, client)
    # A fragment never reaches the server, so the key stays out of its access log.
    page.goto(f"{base(client)}/dashboard#key=abc&model=default")
    expect(page.locator("#model-view")).to_have_attribute("data-model", "default")
    assert page.url == f"{base(client)}/dashboard#model=default"  # the key left the address
    assert page.evaluate("localStorage.getItem('perceptron-api-key')") == "abc"
    assert {API.search(r.url) is not None for r in fetches} == {True}
    assert [r.all_headers().get("authorization") for r in fetches] == ["Bearer abc"] * len(fetches)

    fetches.clear()
    page.goto(f"{base(client)}/dashboard")  # the stored key is used from now on
    expect(page.locator("#model-view")).to_have_attribute("data-model", "default")
    assert len(fetches) >= 2
    assert [r.all_headers().get("authorization") for r in fetches] == ["Bearer abc"] * len(fetches)
    assert aborted == []


def test_a_label_shows_by_push_without_a_reload(make_service: MakeService, page: Page) -> None:
    """The page follows its model by push (an EventSource on /models/{name}/events): a label
    sent through the API shows within a second, and the page reads no figures itself
    meanwhile. With keys on, the stream's key goes in a cookie, never in its URL."""
    reader, admin = "reader-key-0123456789", "admin-key-0123456789"
    client = make_service(auth=True, api_keys=f"predict:{reader},admin:{admin}")
    client.headers["authorization"] = f"Bearer {admin}"
    assert client.put("/models/live", json={"n_features": 2}).status_code == 201
    aborted = only_the_service(page, client)
    streams: list[Request] = []
    fetches: list[str] = []
    page.on("request", lambda r: streams.append(r) if r.resource_type == "eventsource" else None)
    page.on("request", lambda r: fetches.append(r.url) if r.resource_type == "fetch" else None)
    page.goto(f"{base(client)}/dashboard#key={reader}&model=live")
    expect(page.locator("#counter-seen")).to_have_text("0")
    expect(page.locator("#status")).to_have_attribute("data-push", "true")
    assert [r.url for r in streams] == [f"{base(client)}/models/live/events"]
    headers = streams[0].all_headers()
    assert "authorization" not in headers
    assert f"perceptron_key={reader}" in headers.get("cookie", "")
    fetches.clear()
    for n in (1, 2, 3):
        body = {"model": "live", "features": [n, -1], "label": 1 if n % 2 else -1}
        assert client.post("/learn", json=body).status_code == 200
        expect(page.locator("#counter-seen")).to_have_text(str(n), timeout=1000)
    expect(page.locator("#status-text")).to_have_text(re.compile(r"^live · pushed "))
    assert [u for u in fetches if "/metrics" in u or "/checkpoints" in u] == []
    assert len(streams) == 1  # one stream all along
    assert aborted == []


def test_a_refused_request_asks_for_a_key(client: httpx.Client, page: Page) -> None:
    def guard(route: Route) -> None:
        key = route.request.headers.get("authorization")
        if key == "Bearer s3cret":
            route.continue_()
        else:
            status = 401 if key is None else 403
            route.fulfill(status=status, json={"detail": "Key refused.", "code": "unauthorized"})

    aborted = only_the_service(page, client)
    page.route(API, guard)
    page.goto(f"{base(client)}/dashboard")
    expect(page.locator("#auth")).to_be_visible()
    expect(page.locator("#model-view")).to_be_hidden()
    expect(page.locator("#status")).to_have_attribute("data-state", "auth")

    page.fill("#auth-key", "wrong")
    page.click("#auth-submit")
    expect(page.locator("#auth-message")).to_contain_text("403")
    expect(page.locator("#auth")).to_be_visible()

    page.fill("#auth-key", "s3cret")
    page.click("#auth-submit")
    expect(page.locator("#auth")).to_be_hidden()
    expect(page.locator("#model-view")).to_have_attribute("data-model", "default")
    expect(page.locator("#status")).to_have_attribute("data-state", "live")
    assert page.evaluate("localStorage.getItem('perceptron-api-key')") == "s3cret"
    assert aborted == []


def window_rates(curve: dict[str, Any]) -> tuple[int, list[float | None]]:
    """The page's rate over the last ~100 examples at each point of the learning curve: over
    a whole number of its steps (``span``), None until the curve reaches that far back."""
    every, points = curve["every"], curve["points"]
    span = every * -(-100 // every)
    at = {p["examples"]: p["mistakes"] for p in points}
    if points and points[0]["examples"] == every:
        at[0] = 0
    rates = [
        None
        if p["examples"] - span not in at
        else (p["mistakes"] - at[p["examples"] - span]) / span
        for p in points
    ]
    return span, rates


def hover_examples_chart(page: Page, examples: int, last: int) -> list[str]:
    """Hover the chart over examples (its x from 0 to ``last``) at ``examples``: the lines of
    its tooltip."""
    chart = page.locator("#chart-examples")
    box = chart.bounding_box()
    assert box is not None
    left, right = 48, 16  # the chart's margins, in its own units (1:1 on this page)
    x = left + (box["width"] - left - right) * examples / last
    chart.hover(position={"x": x, "y": 60})
    tip = page.locator("#chart-examples + .tooltip")
    expect(tip).to_be_visible()
    return [line.strip() for line in tip.inner_text().splitlines() if line.strip()]


def test_the_readme_demo_draws_a_learning_curve(make_service: MakeService, page: Page) -> None:
    """README: `perceptron replay --dataset digits --multiclass ovr --rate 100` and the
    dashboard. The 1,797 digits in file order: the rate over the last examples falls from 51%
    to 14% (the last 128: a whole number of the curve's steps of 32), the cumulative one from
    51% to 16%; both lines drawn and named."""
    client = make_service()
    aborted = only_the_service(page, client)
    perceptron = str(Path(sys.executable).with_name("perceptron"))
    command = [perceptron, "replay", "--dataset", "digits", "--multiclass", "ovr"]
    command += ["--rate", "100", "--quiet"]
    replay = subprocess.Popen([*command, "--url", base(client)], stdout=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: client.get("/models/digits").status_code == 200, what="model")
        page.goto(f"{base(client)}/dashboard#model=digits")
        expect(page.locator("#model-view")).to_have_attribute("data-model", "digits")
        out, _ = replay.communicate(timeout=120)
    finally:
        replay.kill()
    assert replay.returncode == 0 and re.search(r"mistakes\s+293\b", out), out

    m = client.get("/models/digits/metrics").json()
    curve = m["curve"]
    assert curve["every"] == 32 and len(curve["points"]) == 56  # up to example 1,792
    expect(page.locator("#counter-seen")).to_have_text("1,797")
    expect(page.locator("#chart-examples")).to_have_attribute("data-points", "56")

    # Both lines, each named in the legend.
    span, rates = window_rates(curve)
    drawn = [r for r in rates if r is not None]
    assert span == 128 and len(drawn) == 53  # from example 128 on
    assert round(drawn[0], 3) == 0.508 and round(drawn[-1], 3) == 0.141
    expect(page.locator("#window-legend")).to_have_text("last 128 examples")
    expect(page.locator("#running-legend")).to_have_text(
        "cumulative: mistakes so far / examples so far"
    )
    assert vertices(page, "#chart-examples .series-running polyline") == 56
    window = page.locator("#chart-examples .series-window path.line").get_attribute("d") or ""
    assert window.count("M") == 1 and window.count("L") == 52  # one line of 53 points
    expect(page.locator("#chart-examples .series-window circle.pt")).to_have_count(53)

    # The tooltip names both lines, with the numbers of the API's curve.
    first = curve["points"][3]  # example 128: the first with a window behind it
    assert hover_examples_chart(page, first["examples"], 1792) == [
        "after 128 examples",
        f"last 128 examples: {pct(drawn[0])}",
        f"cumulative: {pct(first['rate'])}",
        f"{first['mistakes']:,} mistakes in all",
    ]
    end = curve["points"][-1]
    assert hover_examples_chart(page, end["examples"], 1792) == [
        "after 1,792 examples",
        f"last 128 examples: {pct(drawn[-1])}",
        f"cumulative: {pct(end['rate'])}",
        f"{end['mistakes']:,} mistakes in all",
    ]

    expected, start = trend(m)
    assert (expected, start) == ("falling", 65 / 128)
    expect(page.locator("#headline")).to_have_attribute("data-trend", "falling")
    expect(page.locator("#headline-text")).to_have_text(
        "Learning: mistake rate falling from 50.8% to 10.0%"
    )
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-demo.png"), full_page=True)
    assert aborted == []


def test_one_labelled_example_reads_right(client: httpx.Client, page: Page) -> None:
    """Singular nouns, whole-number ticks over examples, a rate axis that ends at 100%."""
    aborted = only_the_service(page, client)
    assert client.put("/models/one", json={"n_features": 2}).status_code == 201
    # Learned from zero weights: w = x, b = 1, so the margin is R itself and R²/γ² = 1.
    body = {"model": "one", "features": [1.0, 0.0], "label": 1}
    assert client.post("/learn", json=body).json()["mistake"] is True
    page.goto(f"{base(client)}/dashboard#model=one")
    expect(page.locator("#counter-seen")).to_have_text("1")
    expect(page.locator("#headline-sub")).to_have_text(
        "Only 1 labelled example so far; a trend needs a few more."
    )
    expect(page.locator("#rate-cumulative-sub")).to_have_text("1 of 1 example")
    expect(page.locator("#bound-value")).to_have_text("≈ 1 mistake")
    for chart in ("#chart-time", "#chart-examples"):
        ys = page.locator(f"{chart} text.tick-y").all_text_contents()
        assert ys == ["0%", "25%", "50%", "75%", "100%"], (chart, ys)
    xs = page.locator("#chart-examples text.tick-x").all_text_contents()
    assert xs == ["0", "1"]
    expect(page.locator("#chart-examples .series-running circle.pt")).to_have_count(1)
    # Times on a 24-hour clock, in the browser's time zone (UTC here), the date as en-US has it.
    created = datetime.fromtimestamp(client.get("/models/one").json()["created"], UTC)
    when = f"{created:%b} {created.day}, {created:%Y, %H:%M}"
    expect(page.locator("#version-sub")).to_have_text(f"model “one”, created {when}")
    expect(page.locator("#status-text")).to_have_text(
        re.compile(r"^live · (updated|pushed) \d\d:\d\d:\d\d$")
    )
    ticks = page.locator("#chart-time text.tick-x").all_text_contents()
    assert ticks and all(re.fullmatch(r"\d\d:\d\d:\d\d", t) for t in ticks), ticks
    matrix_fits(page)  # a 2 x 2 matrix shows whole, with no scroll bar either way
    assert aborted == []


def test_an_imported_model_says_which_outcomes_it_knows(client: httpx.Client, page: Page) -> None:
    """An import carries the counters, not the last outcomes: the windows count what the
    model learned since, and the headline says why it shows no trend."""
    aborted = only_the_service(page, client)
    client.put("/models/a", json={"n_features": 1, "fit_bias": False})
    ys = [1 if i % 2 == 0 else -1 for i in range(200)]  # each a mistake: w turns each time
    client.post("/learn/batch", json={"model": "a", "features": [[1.0]] * 200, "labels": ys})
    assert client.post("/models/b/import", json=client.get("/models/a/export").json()).is_success
    page.goto(f"{base(client)}/dashboard#model=b")
    expect(page.locator("#headline-text")).to_have_text("Mistake rate 100.0% in all")
    expect(page.locator("#rate-last-100-sub")).to_have_text(
        "none known since the import or promotion"
    )
    expect(page.locator("#rate-cumulative-sub")).to_have_text("200 of 200 examples")
    for y in (1, -1, -1, -1):  # w = 0 after 200 turns: -1, then right three times after it
        client.post("/learn", json={"model": "b", "features": [1.0], "label": y})
    wrong = client.get("/models/b/metrics").json()["mistake_rate"]
    n = round(wrong["last_100"] * 4)
    expect(page.locator("#rate-last-100-sub")).to_have_text(f"{n} of the last 4 wrong")
    expect(page.locator("#rate-last-1000-sub")).to_have_text(f"{n} of the last 4 wrong")
    expect(page.locator("#headline-sub")).to_contain_text("last 4 since")
    assert aborted == []


@pytest.mark.parametrize("locale", [pytest.param("de-DE", id="de-DE")])
def test_numbers_and_dates_follow_the_browsers_locale(client: httpx.Client, page: Page) -> None:
    """The words stay English; the digits, separators and date order are the browser's."""
    aborted = only_the_service(page, client)
    assert client.put("/models/big", json={"n_features": 2}).status_code == 201
    rng = np.random.default_rng(3)
    for _ in range(2):  # 1,200 examples: more than one batch holds
        xs = rng.normal(size=(600, 2)).round(3)
        body = {
            "model": "big",
            "features": xs.tolist(),
            "labels": np.where(xs[:, 0] > 0, 1, -1).tolist(),
        }
        assert client.post("/learn/batch", json=body).status_code == 200
    m = client.get("/models/big/metrics").json()
    mistakes, rate = m["counters"]["mistakes"], m["mistake_rate"]["cumulative"]
    assert m["counters"]["seen"] == 1200 and 0 < rate < 1

    page.goto(f"{base(client)}/dashboard#model=big")
    expect(page.locator("#counter-seen")).to_have_text("1.200")  # en-US: 1,200
    german = f"{mistakes:,}".replace(",", ".")
    expect(page.locator("#rate-cumulative-sub")).to_have_text(f"{german} of 1.200 examples")
    # A decimal comma, and a space (no-break) before the percent sign.
    share = pct(rate).removesuffix("%").replace(".", ",")
    assert page.locator("#rate-cumulative").text_content() == f"{share}\u00a0%"
    created = datetime.fromtimestamp(client.get("/models/big").json()["created"], UTC)
    expect(page.locator("#version-sub")).to_have_text(
        f"model “big”, created {created:%d.%m.%Y, %H:%M}"
    )
    assert aborted == []


def matrix_fits(page: Page) -> None:
    """The confusion matrix shows whole, its "total" column inside the card, and the page
    itself does not scroll sideways."""
    wrap = page.locator(".matrix-wrap")
    assert wrap.evaluate("w => w.scrollWidth <= w.clientWidth"), "the matrix scrolls"
    assert wrap.evaluate("w => w.scrollHeight <= w.clientHeight"), "the matrix scrolls down"
    box, total = wrap.bounding_box(), page.locator("#confusion thead th.total").bounding_box()
    assert box and total and total["x"] + total["width"] <= box["x"] + box["width"]
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_three_classes_fit_a_desktop_and_a_phone(client: httpx.Client, page: Page) -> None:
    aborted = only_the_service(page, client)
    classes = ["setosa", "versicolor", "virginica"]
    spec = {"classes": classes, "n_features": 4}
    assert client.put("/models/iris", json=spec).status_code == 201
    rng = np.random.default_rng(4)
    xs = rng.normal(size=(300, 4)).round(3)
    ys = [classes[int(i)] for i in np.argmax(xs[:, :3], axis=1)]
    body = {"model": "iris", "features": xs.tolist(), "labels": ys}
    assert client.post("/learn/batch", json=body).status_code == 200
    ARTIFACTS.mkdir(exist_ok=True)

    page.set_viewport_size(DESKTOP)
    page.goto(f"{base(client)}/dashboard#model=iris")
    expect(page.locator("#counter-seen")).to_have_text("300")
    expect(page.locator("#cm-2-2 small")).to_be_visible()  # with the share of the row
    page.screenshot(path=str(ARTIFACTS / "dashboard-1280.png"), full_page=True)
    matrix_fits(page)

    page.set_viewport_size(PHONE)
    expect(page.locator("#confusion")).to_have_class(re.compile(r"\bcompact\b"))
    page.screenshot(path=str(ARTIFACTS / "dashboard-phone.png"), full_page=True)
    matrix_fits(page)
    charts = page.locator("#chart-examples").bounding_box()
    assert charts and charts["width"] <= PHONE["width"]
    assert aborted == []


def hover_mark(page: Page, chart: str, id: str) -> Locator:
    """The mouse on the line of mark ``id`` of ``chart``: the lines its tooltip names marks
    with."""
    box = page.locator(f"#{chart} .mark[data-id='{id}'] line").bounding_box()
    assert box is not None
    page.mouse.move(box["x"], box["y"] + box["height"] / 2)
    return page.locator(f"#{chart} ~ .tooltip .tip-mark")


def test_the_page_shows_who_taught_the_model_and_its_checkpoints_on_the_timeline(
    make_service: MakeService, page: Page, clock: Clock
) -> None:
    alice, bob = "a" * 24, "b" * 24  # a trainer, and an admin
    client = make_service(
        series_bucket_s=1,
        default_model=False,
        compact_every=7,
        checkpoint_every=20,
        auth=True,
        api_keys=f"alice=train:{alice},bob=admin:{bob}",
    )
    client.headers["authorization"] = f"Bearer {bob}"
    assert client.put("/models/m", json={"n_features": 3}).status_code == 201
    rng = np.random.default_rng(11)
    for i in range(8):
        next_bucket(clock)
        xs = rng.normal(size=(25, 3)).round(3).tolist()
        body = {"model": "m", "features": xs, "labels": rng.choice([-1, 1], 25).tolist()}
        key = alice if i % 4 else bob  # alice sends three batches of every four
        r = client.post("/learn/batch", json=body, headers={"authorization": f"Bearer {key}"})
        assert r.status_code == 200
    version = client.get("/models/m").json()["version"]
    assert client.post("/models/m/rollback", json={"version": version // 2}).status_code == 200
    next_bucket(clock)
    m = client.get("/models/m/metrics").json()
    checkpoints = client.get("/models/m/checkpoints").json()["checkpoints"]
    reasons = {c["reason"] for c in checkpoints}
    assert {"scheduled", "before rollback"} <= reasons, reasons
    aborted = only_the_service(page, client)

    page.goto(f"{base(client)}/dashboard#key={bob}&model=m")
    expect(page.locator("#model-view")).to_have_attribute("data-model", "m")
    # Who taught it: one row per key's name, as the API counts them, most labelled first.
    rows = page.locator("#sources tbody tr")
    expect(rows).to_have_count(2)
    for i, s in enumerate(m["sources"]):
        cells = [
            s["source"],
            f"{s['labelled']:,}",
            pct(s["mistakes"] / s["labelled"]),
            f"{s['updates']:,}",
        ]
        expect(rows.nth(i).locator("td")).to_have_text(cells)
    assert [s["source"] for s in m["sources"]] == ["alice", "bob"]
    expect(page.locator("#sources-empty")).to_be_hidden()
    # Every checkpoint within the chart's time is marked on it, by its id; the list shows the
    # newest, newest first, with why each was made.
    first, last = m["series"]["points"][0]["t"], m["series"]["points"][-1]["t"]
    shown = sorted(c["id"] for c in checkpoints if first <= c["time"] // 1 <= last)  # 1 s buckets
    assert shown
    marks = page.locator("#chart-time .mark")
    expect(marks).to_have_count(len(shown))
    assert sorted(int(i) for i in marks.evaluate_all("ms => ms.map(m => m.dataset.id)")) == shown
    expect(page.locator("#chart-time .mark-before-rollback")).to_have_count(1)
    newest = sorted(checkpoints, key=lambda c: -c["id"])[:8]
    items = page.locator("#checkpoints li")
    expect(items).to_have_count(len(newest))
    for item, c in zip(items.all(), newest, strict=True):
        expect(item).to_have_attribute("data-id", str(c["id"]))
        expect(item).to_contain_text(f"checkpoint #{c['id']} · version {c['version']:,}")
        expect(item).to_contain_text(c["reason"])
    # Hovering the bucket of the rollback names its checkpoint in the tooltip.
    before = next(c for c in checkpoints if c["reason"] == "before rollback")
    named = hover_mark(page, "chart-time", str(before["id"]))
    expect(named.filter(has_text=f"checkpoint #{before['id']} · ")).to_have_count(1)
    page.screenshot(path=str(ARTIFACTS / "dashboard-history.png"), full_page=True)
    assert aborted == []


def duration(seconds: float | None) -> str:
    """The page's delay in en-US: seconds, minutes, hours or days, whichever it reaches;
    one decimal under 10 of the unit (none when it is 0), none above."""
    if seconds is None:
        return "—"
    size, unit = next(
        ((s, u) for s, u in [(86400, "day"), (3600, "hr"), (60, "min")] if seconds >= s),
        (1, "sec"),
    )
    v = Decimal(repr(seconds / size))
    v = v.quantize(Decimal("0.1") if v < 10 else Decimal("1"), rounding=ROUND_HALF_UP)
    text = f"{v.normalize():f}"
    if unit == "day":
        unit = "day" if v == 1 else "days"
    return f"{text} {unit}"


def test_the_labels_card_shows_the_delay_and_the_defaults(
    make_service: MakeService, page: Page
) -> None:
    """For the model shown: the median and 95th percentile delay from prediction to label,
    the share of labels that came by default and the predictions awaiting theirs, as the
    metrics report them; a model without a default label says it has none."""
    client = make_service(default_model=False)
    spec = {"classes": [0, 1], "n_features": 2, "feedback_ttl_s": 1, "default_label": 0}
    assert client.put("/models/clicks", json=spec).status_code == 201
    aborted = only_the_service(page, client)
    page.goto(f"{base(client)}/dashboard#model=clicks")
    expect(page.locator("#labels")).to_have_attribute("data-default", "0")
    expect(page.locator("#delay-median")).to_have_text("—")
    expect(page.locator("#defaulted-share")).to_have_text("—")
    expect(page.locator("#labels-text")).to_have_text(
        "No label has come as feedback yet. A prediction with no label after 1 sec is "
        "learned as “0”: 0 so far."
    )
    expect(page.locator("#model-config")).to_contain_text("default label 0 after 1 sec")

    # 8 predictions, 3 labelled at once: 5 await their default, then get it.
    xs = [[i - 4, 1] for i in range(8)]
    got = client.post("/predict/batch", json={"model": "clicks", "features": xs}).json()
    ids = [p["prediction_id"] for p in got["predictions"]]
    labels = [{"prediction_id": i, "label": 1} for i in ids[:3]]
    assert client.post("/feedback/batch", json={"feedback": labels}).status_code == 200
    wait_until(
        lambda: client.get("/models/clicks").json()["counters"]["defaulted"] == 5,
        timeout=20,
        what="the defaults",
    )
    m = client.get("/models/clicks/metrics").json()
    delays = m["labels"]
    assert delays["counted"] == 3 and delays["awaiting_default"] == 0
    assert delays["defaulted_share"] == 5 / 8
    expect(page.locator("#defaulted-share")).to_have_text(pct(5 / 8))
    expect(page.locator("#awaiting-default")).to_have_text("0")
    for element, key in [("#delay-median", "median_s"), ("#delay-p95", "p95_s")]:
        expect(page.locator(element)).to_have_text(duration(delays[key]))
        assert float(page.locator(element).get_attribute("data-value") or "nan") == delays[key]
    expect(page.locator("#labels-text")).to_have_text(
        "Delays of 3 labels that came as feedback. A prediction with no label after "
        "1 sec is learned as “0”: 5 so far."
    )
    expect(page.locator("#counter-defaulted")).to_have_text("5")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-labels.png"), full_page=True)
    # Longer delays read in the unit they reach.
    shown = page.evaluate(
        "async (vs) => { const f = await import('./dashboard/static/format.js');"
        " return vs.map(f.fmtDuration); }",
        [0.5, 0.95, 42, 210, 7560, 86400, 3 * 86400],
    )
    assert shown == ["0.5 sec", "1 sec", "42 sec", "3.5 min", "2.1 hr", "1 day", "3 days"]

    # A model whose predictions wait an hour: 3 of 4 await their default.
    spec = {**spec, "feedback_ttl_s": 3600, "default_label": 1}
    assert client.put("/models/later", json=spec).status_code == 201
    got = client.post("/predict/batch", json={"model": "later", "features": xs[:4]}).json()
    first = {"prediction_id": got["predictions"][0]["prediction_id"], "label": 0}
    assert client.post("/feedback", json=first).status_code == 200
    assert client.get("/models/later/metrics").json()["labels"]["awaiting_default"] == 3
    page.locator("#model-select").select_option("later")
    expect(page.locator("#labels")).to_have_attribute("data-default", "1")
    expect(page.locator("#awaiting-default")).to_have_text("3")
    expect(page.locator("#defaulted-share")).to_have_text("0%")
    expect(page.locator("#labels-text")).to_have_text(
        "Delays of 1 label that came as feedback. A prediction with no label after "
        "1 hr is learned as “1”: 0 so far."
    )

    # A model without a default label: the default's figures say so.
    assert client.put("/models/plain", json={"n_features": 2}).status_code == 201
    page.locator("#model-select").select_option("plain")
    expect(page.locator("#labels")).to_have_attribute("data-default", "none")
    expect(page.locator("#defaulted-share")).to_have_text("no default label")
    expect(page.locator("#awaiting-default")).to_have_text("no default label")
    expect(page.locator("#delay-p95")).to_have_text("—")
    expect(page.locator("#labels-text")).to_have_text(
        "No label has come as feedback yet. No default label: a label that comes more than "
        "1 day after its prediction is refused (410)."
    )
    assert aborted == []


def test_challengers_are_drawn_side_by_side_and_follow_by_push(
    client: httpx.Client, page: Page
) -> None:
    """A model with challengers shows each beside the served learner: a learning curve each
    on one chart, and a row of figures each, as GET .../challengers reports them; labels and
    a promotion show by push, without a reload; with no challenger left, the card goes."""
    assert client.put("/models/side", json={"n_features": 2}).status_code == 201
    for id, body in (("avg", {"averaged": True}), ("pa", {"algorithm": "pa1", "C": 0.1})):
        assert client.put(f"/models/side/challengers/{id}", json=body).status_code == 201
    aborted = only_the_service(page, client)
    page.goto(f"{base(client)}/dashboard#model=side")
    expect(page.locator("#status")).to_have_attribute("data-push", "true")
    card = page.locator("#challengers")
    expect(card).to_be_visible()
    rows = page.locator("#learners tbody tr")
    expect(rows).to_have_count(3)
    for n in range(1, 31):
        learn = {"model": "side", "features": [n % 7 - 3, n % 5 - 2], "label": 1 if n % 3 else -1}
        assert client.post("/learn", json=learn).status_code == 200
    expect(rows.nth(1).locator("td").nth(2)).to_have_text("30", timeout=2000)
    got = client.get("/models/side/challengers").json()
    want = [("served", got["served"])] + [(c["id"], c) for c in got["challengers"]]
    for i, (id, learner) in enumerate(want):
        cells = rows.nth(i).locator("td")
        expect(cells.nth(0)).to_have_text(id)
        expect(cells.nth(2)).to_have_text(str(learner["seen"]))
        expect(cells.nth(3)).to_have_text(str(learner["mistakes"]))
        expect(cells.nth(5)).to_have_text(pct(learner["mistake_rate"]["all"]))
        served_same = learner.get("served_mistakes")
        expect(cells.nth(6)).to_have_text("—" if id == "served" else pct(served_same / 30))
    expect(rows.nth(2).locator("td").nth(1)).to_have_text("PA-I C 0.1")
    assert page.locator("#chart-challengers .series-learner").count() == 3
    assert int(page.locator("#chart-challengers").get_attribute("data-points") or 0) >= 30

    # One that joins after 30 labels: counted over its own 12, beside the served learner's
    # mistakes on those 12 (not since the model began), its curve starting where it joined.
    assert client.put("/models/side/challengers/late", json={}).status_code == 201
    for n in range(12):
        late_body = {"model": "side", "features": [1.0, n % 2 * 2.0 - 1.0], "label": -1}
        assert client.post("/learn", json=late_body).status_code == 200
    late_row = page.locator("#learners tbody tr[data-id='late'] td")
    expect(late_row.nth(2)).to_have_text("12", timeout=2000)
    late = client.get("/models/side/challengers/late").json()
    assert (late["since"], late["seen"]) == (30, 12)
    counters = client.get("/models/side").json()["counters"]
    before = got["served"]["mistakes"]  # (the served learner's after the first 30)
    assert late["served_mistakes"] == counters["mistakes"] - before
    expect(late_row.nth(5)).to_have_text(pct(late["mistake_rate"]["all"]))
    expect(late_row.nth(6)).to_have_text(pct(late["served_mistakes"] / 12))
    served_row = page.locator("#learners tbody tr[data-id='served'] td")
    expect(served_row.nth(5)).to_have_text(pct(counters["mistakes"] / 42))

    def first_x(i: int) -> float:
        points = page.locator(f"#chart-challengers .series-learner-{i} polyline")
        return float((points.get_attribute("points") or "").split()[0].split(",")[0])

    assert first_x(2) > first_x(0) == first_x(1)  # ('late' is the third row: avg, late, pa)
    assert client.delete("/models/side/challengers/late").status_code == 204
    expect(rows).to_have_count(3, timeout=2000)
    r = client.post("/models/side/promote", json={"challenger": "pa", "demote_as": "before"})
    assert r.status_code == 200, r.text
    expect(rows.nth(0).locator("td").nth(1)).to_have_text("PA-I C 0.1", timeout=2000)
    expect(page.locator("#learners tbody tr[data-id='before']")).to_have_count(1)
    for id in ("avg", "before"):
        assert client.delete(f"/models/side/challengers/{id}").status_code == 204
    expect(card).to_be_hidden(timeout=2000)
    assert aborted == []


def test_the_documented_screenshot_is_taken(client: httpx.Client, tmp_path: Path) -> None:
    """docs/metrics.md's way to take a screenshot (chromium's own --screenshot never returns
    while the page keeps its event stream): run as written, it writes a PNG of the page."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "metrics.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", text, re.S)
    code = block.replace("http://127.0.0.1:8000", base(client))
    guard = (  # (as every browser test: nothing but the service is asked for)
        f"    page.route('**/*', lambda r: r.continue_() if r.request.url.startswith("
        f"{base(client)!r}) else r.abort())\n    page.goto("
    )
    assert code.count("    page.goto(") == 1
    code = code.replace("    page.goto(", guard)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    png = (tmp_path / "dashboard.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000


def test_the_drift_detectors_events_are_marked_on_the_curves_and_come_by_push(
    client: httpx.Client, page: Page
) -> None:
    """Each warning and drift of a model's detector is marked on the curve over examples at
    the example it came (and on the timeline), named in the tooltip there; a new one shows by
    push, without a reload. A model without a detector has no such mark."""
    drift = {"detector": "ddm", "warm_start": 10, "warning_threshold": 1.2}
    assert client.put("/models/turn", json={"n_features": 2, "drift": drift}).status_code == 201
    xs = np.random.default_rng(3).normal(size=(600, 2)).round(3)
    ys = np.where(xs[:, 0] > 0, 1, -1) * np.repeat([1, -1, 1], 200)  # (turned, and back)
    body = {"model": "turn", "features": xs[:400].tolist(), "labels": ys[:400].tolist()}
    assert client.post("/learn/batch", json=body).status_code == 200
    events = client.get("/models/turn/drift").json()["events"]
    at = [i for i, e in enumerate(events) if e["kind"] == "drift"]
    assert at, events
    aborted = only_the_service(page, client)
    page.goto(f"{base(client)}/dashboard#model=turn")
    expect(page.locator("#status")).to_have_attribute("data-push", "true")
    curve = page.locator("#chart-examples")
    for kind in ("warning", "drift"):
        expect(curve.locator(f".mark-{kind}")).to_have_count(sum(e["kind"] == kind for e in events))
    expect(page.locator("#chart-time .mark-drift")).to_have_count(
        sum(e["kind"] == "drift" for e in events)
    )
    # Hovering the drift's mark names it, at its example.
    last = events[at[-1]]
    named = hover_mark(page, "chart-examples", f"drift-{at[-1]}")
    expect(named.filter(has_text=f"drift detected at example {last['at_seen']}")).to_have_count(1)
    # The concept turns back: the detector's next events come by push.
    back = {"model": "turn", "features": xs[400:].tolist(), "labels": ys[400:].tolist()}
    assert client.post("/learn/batch", json=back).status_code == 200
    more = client.get("/models/turn/drift").json()["events"]
    assert len(more) > len(events)
    expect(curve.locator(".mark")).to_have_count(len(more), timeout=3000)
    page.screenshot(path=str(ARTIFACTS / "dashboard-drift.png"), full_page=True)
    # (a model without a detector: no mark)
    assert client.put("/models/plain", json={"n_features": 2}).status_code == 201
    client.post("/learn/batch", json={**body, "model": "plain"})
    page.goto(f"{base(client)}/dashboard#model=plain")
    expect(page.locator("#model-view")).to_have_attribute("data-model", "plain")
    expect(page.locator("#status")).to_have_attribute("data-push", "true")
    expect(page.locator("#chart-examples .mark")).to_have_count(0)
    assert aborted == []


def test_a_retrain_is_marked_apart_from_a_drift_on_the_curves(
    client: httpx.Client, page: Page
) -> None:
    """A drift at which the background learner replaced the served one ("on_drift": "retrain")
    is marked as a retrain on both curves, named so in its tooltip."""
    drift = {"detector": "ddm", "on_drift": "retrain", "warm_start": 10, "warning_threshold": 1.2}
    assert client.put("/models/heal", json={"n_features": 2, "drift": drift}).status_code == 201
    xs = np.random.default_rng(3).normal(size=(400, 2)).round(3)
    ys = np.where(xs[:, 0] > 0, 1, -1) * np.repeat([1, -1], 200)
    body = {"model": "heal", "features": xs.tolist(), "labels": ys.tolist()}
    assert client.post("/learn/batch", json=body).status_code == 200
    events = client.get("/models/heal/drift").json()["events"]
    healed = [i for i, e in enumerate(events) if e["action"] == "retrained"]
    assert healed, events
    only_the_service(page, client)
    page.goto(f"{base(client)}/dashboard#model=heal")
    for chart in ("#chart-examples", "#chart-time"):
        expect(page.locator(f"{chart} .mark-retrained")).to_have_count(len(healed))
        expect(page.locator(f"{chart} .mark-retrained text").first).to_have_text("retrained")
    # Its tooltip names it, at the point of the curve after it (within a few pixels right).
    last = events[healed[-1]]
    box = page.locator(f"#chart-examples .mark[data-id='drift-{healed[-1]}'] line").bounding_box()
    assert box is not None
    line = f"drift detected at example {last['at_seen']},"
    tips = page.locator("#chart-examples ~ .tooltip .tip-mark")
    named = tips.filter(has_text=line).filter(has_text="· retrained")
    for dx in range(8):
        page.mouse.move(box["x"] + dx, box["y"] + box["height"] / 2)
        if named.count():
            break
    expect(named).to_have_count(1)
