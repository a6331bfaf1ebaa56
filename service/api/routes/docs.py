"""The interactive API docs: /docs (Swagger UI) and /redoc (ReDoc), served from this host.

Their scripts and styles come from the pinned package ``fastapi-standalone-docs`` (Swagger
UI's dist and ReDoc's standalone bundle, each with its license beside it, served too:
/docs/LICENSE, /redoc/redoc.standalone.js.LICENSE.txt). The pages themselves are this
package's (service/apidocs/): no inline script or style, no request to another host, so they
run under the Content-Security-Policy of ``edge.py``.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

PAGES = Path(__file__).resolve().parents[2] / "apidocs"
ASSETS = "fastapi_standalone_docs"

router = APIRouter(tags=["docs"], include_in_schema=False)


@router.get("/docs")
async def swagger_ui() -> FileResponse:
    """Swagger UI: every operation, to read and to try."""
    return FileResponse(PAGES / "swagger.html", media_type="text/html")


@router.get("/redoc")
async def redoc() -> FileResponse:
    """ReDoc: the same document as a reference to read."""
    return FileResponse(PAGES / "redoc.html", media_type="text/html")


# Mounted at /docs and /redoc: the pages' own files first, then the package's assets (ReDoc's
# bundle asks for its logo at <page>/logo-mini.svg: the package's folder as it is).
swagger_assets = StaticFiles(directory=PAGES, packages=[(ASSETS, "static/swagger")])
redoc_assets = StaticFiles(directory=PAGES, packages=[(ASSETS, "static/redoc")])
