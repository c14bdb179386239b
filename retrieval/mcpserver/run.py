"""Start `semhist mcp`: over stdio (a desktop assistant or IDE agent starts it as a subprocess)
or streamable HTTP at /mcp (behind the service's tokens: a request without a valid one is a 401
before MCP reads it, and its connection closes; the loopback rule, the connection caps and the
deadlines of `semhist serve` hold)."""

from __future__ import annotations

import logging
import os

from semhist.kernel.errors import missing_extra
from semhist.kernel.settings import Settings

from semhist import History
from ..service.access import Access
from ..service.connections import GUARDED, room_for_connections, uvicorn_options
from ..service.run import check_exposure, worker_environment
from .tools import build

log = logging.getLogger("semhist.mcp")

TRANSPORTS = ("stdio", "http")


def run_mcp(settings: Settings, *, transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765) -> None:
    access = Access.from_settings(settings)
    if transport == "http":
        check_exposure(host, settings)
    history = History(settings)
    try:
        server = build(history, access)
        if transport == "stdio":
            server.run("stdio")
            return
        try:
            import uvicorn
        except ImportError as exc:  # pragma: no cover - the mcp extra brings the service's
            raise missing_extra("uvicorn", "mcp") from exc
        log.info("MCP over streamable HTTP on http://%s:%d/mcp", host, port)
        # the connection guard reads its limits from SEMHIST_* (as serve's workers do): these
        # settings, flags included, are what it must read
        os.environ.update(worker_environment({name: getattr(settings, name) for name in GUARDED}))
        room_for_connections(settings)
        uvicorn.run(Bearer(server.streamable_http_app(host=host), access), host=host, port=port,
                    log_level="warning", **uvicorn_options(settings))
    finally:
        history.close()


class Bearer:
    """ASGI middleware: with tokens configured, an HTTP request needs one of them."""

    def __init__(self, app, access: Access):
        self.app, self.access = app, access

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and not self.access.open:
            auth = dict(scope.get("headers") or ()).get(b"authorization", b"").decode("latin-1")
            token = auth[7:].strip() if auth.lower().startswith("bearer ") else None
            if self.access.grant(token) is None:  # answered before the body is read, and closed: a
                # client without a token holds no place among the served connections
                body = b'{"error": {"type": "unauthorized", "message": "a valid bearer token is needed"}}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                                        (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
