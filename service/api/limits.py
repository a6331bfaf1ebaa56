"""A limit on request bodies, enforced before a handler reads them."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import TooLarge


class BodyTooLarge(TooLarge):
    code = "body_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"The request body is larger than {limit} bytes (PERCEPTRON_MAX_BODY_BYTES); send "
            "smaller batches."
        )


class BodyLimit:
    """Refuse bodies over ``max_bytes``: by Content-Length at once, else as they are read.

    A chunked body (no length given) is counted as the handler reads it, not read ahead: a
    handler that refuses the request first (no valid key) never has it read at all. Past the
    limit, reading raises ``BodyTooLarge``, which the app answers 413 (routes read bodies in
    ``FastJSONRoute``, which lets it through to the app's ServiceError handler).
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit():
                if int(value) > self.max_bytes:
                    await _refuse(send, self.max_bytes)
                    return
                await self.app(scope, receive, send)
                return
        size = 0
        started = False

        async def counted() -> Message:
            nonlocal size
            message = await receive()
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                raise BodyTooLarge(self.max_bytes)  # the app's handler answers 413
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge:
            if started:
                raise
            await _refuse(send, self.max_bytes)  # an app that let it through: answered here


async def _refuse(send: Send, limit: int) -> None:
    import json

    err = BodyTooLarge(limit)
    body = json.dumps({"detail": err.message, "code": err.code}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
