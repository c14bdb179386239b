"""The service closes what it opens: deadlines for a request's headers and body.

uvicorn closes a connection that stays idle after a response (`timeout_keep_alive`) and caps
connections per worker (`limit_concurrency`), but a connection that never finishes its headers
is kept forever: a probe found 15 half-sent and idle sockets still open after 150 s, and a few
hundred would hold a worker's file descriptors. This protocol (uvicorn's httptools one) arms
a deadline when a request starts (or the connection opens) and answers 408 and closes when the
headers are not complete in `header_timeout` seconds, or the body in `body_timeout`.
"""

from __future__ import annotations

import asyncio
import logging
from functools import cache

from semhist.kernel.settings import Settings

log = logging.getLogger("semhist.service")

_TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


@cache
def _deadlines() -> tuple[float, float]:
    """(header, body) seconds, from the settings the workers were started with (SEMHIST_*)."""
    settings = Settings.load()
    return settings.header_timeout, settings.body_timeout


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

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm(_deadlines()[0])

        def on_message_begin(self) -> None:  # a request's first byte (on a kept-alive connection too)
            super().on_message_begin()
            if self._deadline is None:
                self._arm(_deadlines()[0])

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()
            if not self.parser.should_upgrade():  # the body has its own deadline, until its end
                self._arm(_deadlines()[1])

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

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
