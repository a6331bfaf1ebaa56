"""Security headers on every answer: no MIME sniffing, no framing, a content policy."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The dashboard and Swagger UI (/docs) load their own scripts, style sheets and data from
# this origin only.
PAGES = ("/dashboard", "/docs")
PAGE_POLICY = (
    b"default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    b"form-action 'self'; frame-ancestors 'none'"
)
# ReDoc (/redoc) styles its page from script (styled-components) and runs its search in a
# worker it makes from a blob: inline styles and blob workers, but still no script, data or
# font from anywhere else.
REDOC = "/redoc"
REDOC_POLICY = PAGE_POLICY + b"; style-src 'self' 'unsafe-inline'; worker-src blob:"
# JSON and text answers run nothing.
DATA_POLICY = b"default-src 'none'; frame-ancestors 'none'"

_ALWAYS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


class SecurityHeaders:
    """Adds the headers to every HTTP answer (a pure ASGI middleware: no body copied)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path.startswith(PAGES):
            extra = [*_ALWAYS, (b"content-security-policy", PAGE_POLICY)]
        elif path.startswith(REDOC):
            extra = [*_ALWAYS, (b"content-security-policy", REDOC_POLICY)]
        else:
            extra = [*_ALWAYS, (b"content-security-policy", DATA_POLICY)]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        await self.app(scope, receive, sending)
