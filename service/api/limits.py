"""A limit on request bodies, enforced before a handler reads them."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import TooLarge


class BodyTooLarge(TooLarge):
    code = "body_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"The request body is larger than {limit} bytes (PERCEPTRON_MAX_BODY_BYTES); send "
            "smaller batches."
        )


class BodyLimit:
    """Refuse bodies over ``max_bytes``: by Content-Length at once, else before handling."""

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
        # No length given (a chunked body): read it, up to the limit, before the handler does.
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await _refuse(send, self.max_bytes)
                return
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        replay = iter(messages)

        async def replayed() -> Message:
            return next(replay, None) or await receive()

        await self.app(scope, replayed, send)


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
