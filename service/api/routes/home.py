"""GET /: where to go from here. A browser lands on the dashboard; a program gets the links."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

router = APIRouter(include_in_schema=False)

LINKS = {
    "dashboard": "/dashboard",
    "docs": "/docs",
    "redoc": "/redoc",
    "openapi": "/openapi.json",
    "models": "/models",
    "health": "/healthz",
    "ready": "/readyz",
    "metrics": "/metrics",
}


@router.get("/")
async def home(request: Request) -> Response:
    """The dashboard for a browser (a page is what it asks for), the links for the rest."""
    if "text/html" in request.headers.get("accept", ""):
        # Relative, so that it holds behind a proxy's path prefix too.
        return RedirectResponse("dashboard", status_code=307)
    return JSONResponse(
        {
            "service": "Perceptron service",
            "detail": "An online perceptron over HTTP. In a browser: /dashboard (the models "
            "learning, live) and /docs (every operation, to read and try).",
            "links": LINKS,
        }
    )
