"""The dashboard: static files of service/dashboard/, which read the JSON API."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles

from service.contract.store_protocol import COUNTERS

PAGES = Path(__file__).resolve().parents[2] / "dashboard"

router = APIRouter(tags=["dashboard"])


@router.get("/dashboard", include_in_schema=False)
async def read_dashboard() -> FileResponse:
    """The dashboard page."""
    return FileResponse(PAGES / "index.html", media_type="text/html")


# Every counter of a model, in the dashboard's order, as [field, title, help, warns]: a script
# the page loads before dashboard.js, so that the counters are declared once (protocol.py).
_TABLE = json.dumps([[c.name, c.title, c.help, c.warns] for c in COUNTERS])
COUNTERS_JS = f"window.PERCEPTRON_COUNTERS = {_TABLE};\n"


@router.get("/dashboard/counters.js", include_in_schema=False)
async def read_counters() -> Response:
    return Response(COUNTERS_JS, media_type="text/javascript")


static = StaticFiles(directory=PAGES, check_dir=False)
