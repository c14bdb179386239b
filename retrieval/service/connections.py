"""The service closes what it opens: deadlines for a request's headers and body.

uvicorn closes a connection that stays idle after a response (`timeout_keep_alive`) and caps
connections per worker (`limit_concurrency`), but a connection that never finishes its headers
is kept forever: a probe found 15 half-sent and idle sockets still open after 150 s, and a few
hundred would hold a worker's file descriptors. This protocol (uvicorn's httptools one) arms
a deadline when a request starts (or the connection opens) and answers 408 and closes when the
headers are not complete in `header_timeout` seconds, or the body in `body_timeout`.

It also replaces uvicorn's connection cap, which counted every open socket and answered plain
text: 40 half-sent sockets (no token needed) locked every client out until their deadline. Here
connections that have sent a request count against `max_connections`; those still sending their
first headers have a bucket of the same size of their own and at most `max_pending_per_client`
per client address. Beyond either, the answer is the service's JSON error (503), and the
connection is closed. An unauthenticated request's 401 closes its connection (errors.py), so a
client without a token cannot hold the served bucket with idle kept-alive sockets either.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from functools import cache

from semhist.kernel.settings import Settings

log = logging.getLogger("semhist.service")

_TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
_BUSY_BODY = json.dumps({"error": {"type": "unavailable", "message": "the service has as many connections as it "
                                                                     "takes (SEMHIST_MAX_CONNECTIONS): retry"}}).encode()
_BUSY_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(_BUSY_BODY)).encode()),
                 (b"connection", b"close"), (b"retry-after", b"1")]
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\n" + b"".join(k + b": " + v + b"\r\n" for k, v in _BUSY_HEADERS) + \
    b"\r\n" + _BUSY_BODY


async def _busy(scope, receive, send) -> None:
    """The ASGI answer past the cap: the service's JSON error, then the connection closes."""
    await send({"type": "http.response.start", "status": 503, "headers": _BUSY_HEADERS})
    await send({"type": "http.response.body", "body": _BUSY_BODY})


@cache
def _limits() -> tuple[float, float, int, int]:
    """(header s, body s, connections, pending per client), from the settings the workers were
    started with (SEMHIST_*)."""
    s = Settings.load()
    return s.header_timeout, s.body_timeout, s.max_connections, s.max_pending_per_client


def _deadlines() -> tuple[float, float]:
    return _limits()[:2]


try:  # `uvicorn[standard]` brings httptools on CPython
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - a platform without its wheels
    HttpToolsProtocol = None


def guarded_protocol() -> type[asyncio.Protocol] | str:
    """The HTTP protocol for uvicorn: httptools' with deadlines, or (without httptools)
    uvicorn's h11, whose incomplete requests are bounded in size but not in time."""
    if HttpToolsProtocol is None:  # pragma: no cover
        log.warning("httptools is missing: no deadline for a request's headers and body (h11)")
        return "h11"
    return GuardedHttpTools


if HttpToolsProtocol is not None:
    # module level: uvicorn's worker processes receive it pickled, by name
    class GuardedHttpTools(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None
        # per worker process: connections still sending their first headers, by client address,
        # and those that have sent a request
        _pending: Counter = Counter()
        _served: set = set()
        _state = "new"  # -> pending -> served, or refused

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.limit_concurrency = None  # uvicorn's cap counted half-open sockets: ours is below

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            _, _, cap, per_client = _limits()
            host = self.client[0] if self.client else ""
            if self._pending[host] >= per_client or sum(self._pending.values()) >= cap:
                self._state = "refused"
                log.warning("refused a connection from %s: %d of its connections are still sending headers",
                            host, self._pending[host])
                transport.write(_BUSY)
                transport.close()
                return
            self._state, self._host = "pending", host
            self._pending[host] += 1
            self._arm(_deadlines()[0])

        def on_message_begin(self) -> None:  # a request's first byte (on a kept-alive connection too)
            super().on_message_begin()
            if self._deadline is None:
                self._arm(_deadlines()[0])

        def on_headers_complete(self) -> None:
            self._disarm()
            over = self._state == "refused"  # (a request pipelined after the refused one)
            if self._state == "pending":  # its first request: a place among the served, if one is free
                self._unpend()
                over = len(self._served) >= _limits()[2]
                self._state = "refused" if over else "served"
                if not over:
                    self._served.add(self)
            if over:  # uvicorn runs `self.app` for this request: the JSON 503 instead (it closes)
                app, self.app = self.app, _busy
            try:
                super().on_headers_complete()
            finally:
                if over:
                    self.app = app
            if not self.parser.should_upgrade():  # the body has its own deadline, until its end
                self._arm(_deadlines()[1])

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()

        def connection_lost(self, exc) -> None:
            self._disarm()
            if self._state == "pending":
                self._unpend()
            self._served.discard(self)
            self._state = "gone"
            super().connection_lost(exc)

        def _unpend(self) -> None:
            self._pending[self._host] -= 1
            if self._pending[self._host] <= 0:
                del self._pending[self._host]

        def _arm(self, seconds: float) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(seconds, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            cycle = self.cycle  # None, a finished one (a kept-alive connection), or this request's
            if cycle is None or cycle.response_complete or not cycle.response_started:
                self.transport.write(_TIMED_OUT)
            self.transport.close()
