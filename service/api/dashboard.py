"""The dashboard: static files of service/dashboard/, which read the JSON API."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

PAGES = Path(__file__).resolve().parent.parent / "dashboard"

router = APIRouter(tags=["dashboard"])


@router.get("/dashboard", include_in_schema=False)
async def read_dashboard() -> FileResponse:
    """The dashboard page."""
    return FileResponse(PAGES / "index.html", media_type="text/html")


static = StaticFiles(directory=PAGES, check_dir=False)
