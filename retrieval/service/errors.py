"""semhist errors as JSON answers: `{"error": {"type", "message", "index"?, "field"?}}`.

The one place the service turns exceptions into HTTP statuses; nothing answers with a
traceback (an unexpected error is logged and answered as a 500 without details).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from semhist.kernel.errors import (
    BackendError, ConfigError, IndexMismatchError, InputError, NotFoundError, SemhistError, TooLargeError,
)

log = logging.getLogger("semhist.service")

TOO_LARGE = 413
NO_TOKEN = ("missing or wrong bearer token (Authorization: Bearer $SEMHIST_API_TOKEN, or a token from "
            "SEMHIST_TOKENS_FILE)")


class TooLarge(TooLargeError):
    """A request past one of the service's size limits."""


class Unauthorized(SemhistError):
    pass


class Forbidden(SemhistError):
    """A valid token asking for a thread outside its prefixes."""


class UpstreamError(BackendError):
    """The model behind /v1/chat/completions could not be reached."""


class UpstreamTimeout(UpstreamError):
    pass


# most specific first
STATUS: list[tuple[type[SemhistError], int, str]] = [
    (Unauthorized, 401, "unauthorized"),
    (Forbidden, 403, "forbidden"),
    (TooLargeError, TOO_LARGE, "too_large"),
    (NotFoundError, 404, "not_found"),
    (IndexMismatchError, 409, "conflict"),
    (UpstreamTimeout, 504, "upstream_timeout"),
    (UpstreamError, 502, "upstream_unavailable"),
    (InputError, 422, "invalid_request"),
    (ConfigError, 422, "not_supported"),
    (BackendError, 503, "unavailable"),
    (SemhistError, 500, "error"),
]


def error_response(status: int, kind: str, message: str, *, index: int | None = None,
                   field: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"type": kind, "message": message}
    if index is not None:
        body["index"] = index
    if field is not None:
        body["field"] = field
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def _semhist(request: Request, exc: SemhistError) -> JSONResponse:
    status, kind = next((s, k) for cls, s, k in STATUS if isinstance(exc, cls))
    if status >= 500:
        log.warning("%s %s: %s", request.method, request.url.path, exc)
    # a request without a valid token does not keep its connection (connections.py: it would hold
    # a place among the served ones for the keep-alive time)
    headers = {"WWW-Authenticate": "Bearer", "Connection": "close"} if status == 401 else None
    return error_response(status, kind, str(exc), index=getattr(exc, "index", None),
                          field=getattr(exc, "field", None), headers=headers)


def _where(loc: tuple) -> tuple[str, int | None, str | None]:
    """('body', 'messages', 3, 'role') -> ("messages[3].role", 3, "role")."""
    parts = [p for p in loc if p not in ("body", "path", "query")]
    text = ""
    for p in parts:
        text += f"[{p}]" if isinstance(p, int) else (f".{p}" if text else str(p))
    index = next((p for p in parts if isinstance(p, int)), None) if parts[:1] == ["messages"] else None
    field = next((str(p) for p in reversed(parts) if isinstance(p, str) and p != "messages"), None)
    return text or "body", index, field


def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
    if first.get("type") == "json_invalid":
        return error_response(400, "invalid_json", f"the body is not valid JSON: {first.get('msg')}")
    where, index, field = _where(tuple(first.get("loc", ())))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return error_response(422, "invalid_request", f"{where}: {first.get('msg')}{more}", index=index, field=field)


def _http(request: Request, exc: HTTPException) -> JSONResponse:
    kinds = {400: "invalid_json", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}
    message = exc.detail if isinstance(exc.detail, str) else "request refused"
    if exc.status_code == 404 and message == "Not Found":
        message = f"no such route: {request.method} {request.url.path}"
    return error_response(exc.status_code, kinds.get(exc.status_code, "http_error"), message,
                          headers=getattr(exc, "headers", None))


def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal", "internal error; the server log has the details")


class BodyLimit:
    """ASGI middleware: a body past `max_bytes` is answered 413 in our JSON, before any of it
    is parsed (a declared length is checked up front, a chunked body as it arrives)."""

    def __init__(self, app: Any, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
        body, sent = b"".join(chunks), False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()  # the disconnect, when the client goes
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, scope, receive, send) -> None:
        response = error_response(TOO_LARGE, "too_large", f"the request body is larger than {self.max_bytes // 1024} KB "
                                                          "(SEMHIST_MAX_BODY_KB)")
        await response(scope, receive, send)


def bearer_token(value: bytes | None) -> str | None:
    """The token of an `Authorization: Bearer …` header's value."""
    scheme, _, token = (value or b"").decode("latin-1").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class TokenGate:
    """ASGI middleware, with tokens configured (`valid` given). A request that carries a body
    is answered 401 before any of it is read, unless its token is valid: the body used to be read
    whole first (BodyLimit), so 1,000 slow bodies without a token held every served connection
    (connections.py) for the body deadline. And an answer to a request without a valid token
    closes its connection: the routes open without one (/healthz, the inspector's page) would
    otherwise let such a client hold served places for the keep-alive time."""

    def __init__(self, app: Any, valid: Callable[[str | None], bool] | None):
        self.app, self.valid = app, valid

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or self.valid is None:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        if self.valid(bearer_token(headers.get(b"authorization"))):
            await self.app(scope, receive, send)
            return
        if headers.get(b"content-length", b"0").strip() not in (b"", b"0") or b"transfer-encoding" in headers:
            response = error_response(401, "unauthorized", NO_TOKEN,
                                      headers={"WWW-Authenticate": "Bearer", "Connection": "close"})
            await response(scope, receive, send)
            return

        async def closing(message) -> None:
            if message["type"] == "http.response.start":
                given = list(message.get("headers") or ())
                if not any(name.lower() == b"connection" for name, _ in given):
                    message = {**message, "headers": [*given, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, closing)


def install(app: FastAPI) -> None:
    app.add_exception_handler(SemhistError, _semhist)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _invalid)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)
