"""Security headers on every answer: no MIME sniffing, no framing, a content policy."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The dashboard loads its own script, style sheet and data from this origin only.
PAGE_POLICY = (
    b"default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    b"form-action 'self'; frame-ancestors 'none'"
)
# JSON and text answers run nothing.
DATA_POLICY = b"default-src 'none'; frame-ancestors 'none'"
# The interactive API docs are FastAPI's pages (their scripts are not served from here).
DOCS = ("/docs", "/redoc")

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
        if path.startswith(DOCS):
            extra = _ALWAYS
        elif path.startswith("/dashboard"):
            extra = [*_ALWAYS, (b"content-security-policy", PAGE_POLICY)]
        else:
            extra = [*_ALWAYS, (b"content-security-policy", DATA_POLICY)]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        await self.app(scope, receive, sending)
