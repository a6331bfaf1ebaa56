"""The interactive API docs, /docs and /redoc, in headless Chromium with no network.

Every request the page makes to anywhere but the service under test is aborted and recorded:
the docs must list every operation of the OpenAPI document from what the service itself
serves, with its introduction, each group's description and the examples of its bodies, and
run under its Content-Security-Policy (any violation fails the test). Screenshots
go to artifacts/docs.png and artifacts/redoc.png.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, Playwright, Route, expect, sync_playwright

from .test_dashboard import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS

METHODS = {"get", "put", "post", "delete", "patch"}


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture
def base(client: httpx.Client) -> str:
    return str(client.base_url).rstrip("/")


@pytest.fixture
def page(playwright: Playwright, base: str, tmp_path: Path) -> Iterator[Page]:
    """A fresh Chromium page that can reach the service only; what it tried elsewhere, and
    every page error or CSP violation, fails the test."""
    context = playwright.chromium.launch_persistent_context(
        str(tmp_path / "chromium-profile"),
        executable_path=CHROMIUM,
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": 1280, "height": 900},
    )
    page = context.pages[0] if context.pages else context.new_page()
    page.set_default_timeout(15_000)
    outside: list[str] = []
    errors: list[str] = []

    def only_the_service(route: Route) -> None:
        if route.request.url.startswith(base + "/"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", only_the_service)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on(
        "console",
        lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None,
    )
    yield page
    context.close()
    assert outside == [], f"the page asked another host: {outside}"
    assert errors == [], f"the page raised: {errors}"


def operations(client: httpx.Client) -> list[tuple[str, str, str]]:
    """(METHOD, path, operationId) of every operation of the served OpenAPI document."""
    paths = client.get("/openapi.json").json()["paths"]
    return sorted(
        (method.upper(), path, op["operationId"])
        for path, ops in paths.items()
        for method, op in ops.items()
        if method in METHODS
    )


def test_swagger_ui_lists_every_operation_offline(
    client: httpx.Client, base: str, page: Page
) -> None:
    ops = operations(client)
    assert len(ops) >= 15
    page.goto(f"{base}/docs")
    blocks = page.locator(".opblock")
    expect(blocks).to_have_count(len(ops))
    shown = blocks.evaluate_all(
        """els => els.map(e => [
            e.querySelector('.opblock-summary-method').textContent,
            e.querySelector('.opblock-summary-path').getAttribute('data-path')])"""
    )
    assert sorted(map(tuple, shown)) == [(m, p) for m, p, _ in ops]
    expect(page.locator(".info .title")).to_contain_text("Perceptron service")
    # The introduction, and a description under each group of operations.
    expect(page.locator(".info")).to_contain_text("Predict, then feedback")
    tags = client.get("/openapi.json").json()["tags"]
    expect(page.locator(".opblock-tag")).to_have_count(len(tags))
    for tag in tags:
        expect(page.locator(f".opblock-tag[data-tag='{tag['name']}']")).to_contain_text(
            tag["description"][:40]
        )

    # An operation opens and shows its schema, drawn from the document alone.
    page.locator(".opblock-post .opblock-summary-path[data-path='/predict']").click()
    expect(page.locator(".opblock.is-open")).to_contain_text("prediction_id")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "docs.png"))


def test_redoc_lists_every_operation_offline(client: httpx.Client, base: str, page: Page) -> None:
    ops = operations(client)
    page.goto(f"{base}/redoc")
    items = page.locator("li[data-item-id*='/operation/']")
    expect(items).to_have_count(len(ops))
    ids = items.evaluate_all("els => els.map(e => e.getAttribute('data-item-id'))")
    assert sorted(i.rsplit("/", 1)[1] for i in ids) == sorted(o for _, _, o in ops)
    expect(page.locator("h1").first).to_contain_text("Perceptron service")
    expect(page.locator("body")).to_contain_text("Predict, then feedback")
    # Every request and answer sample is an example of the document, not made up from the
    # schema: none shows the placeholders ReDoc invents for an object's keys.
    expect(page.locator("body")).to_contain_text('"prediction_id"')
    expect(page.locator("body")).not_to_contain_text("property1")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "redoc.png"))


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/docs", "swagger-ui-bundle.js"),
        ("/docs/swagger-ui-bundle.js", "SwaggerUIBundle"),
        ("/docs/swagger-ui.css", ".swagger-ui"),
        ("/docs/LICENSE", "Apache License"),
        ("/redoc", "redoc.standalone.js"),
        ("/redoc/redoc.standalone.js", "Redoc"),
        ("/redoc/redoc.standalone.js.LICENSE.txt", "ReDoc - OpenAPI"),
    ],
)
def test_docs_assets_and_their_licenses_are_served_here(
    client: httpx.Client, path: str, expected: str
) -> None:
    r = client.get(path)
    assert r.status_code == 200, path
    assert expected in r.text
    if path in ("/docs", "/redoc"):
        assert "http://" not in r.text and "https://" not in r.text  # no CDN, no fonts
        assert "content-security-policy" in r.headers


def test_docs_pages_run_no_inline_script(client: httpx.Client) -> None:
    swagger = client.get("/docs").headers["content-security-policy"]
    assert "default-src 'self'" in swagger and "unsafe" not in swagger
    redoc = client.get("/redoc").headers["content-security-policy"]
    directives = dict(d.strip().split(" ", 1) for d in redoc.split(";"))
    assert directives["default-src"] == "'self'"  # scripts: this host's files only
    assert [d for d, v in directives.items() if "unsafe" in v] == ["style-src"]
