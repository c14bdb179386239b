"""The service closes what it opens, and no client can make it wait: deadlines and sizes for a
request's head and body, and connection caps that newcomers cannot be locked out of.

uvicorn keeps a connection that never finishes its headers for ever, holds a head streamed in
pieces whole (httptools joins a header's pieces with `bytes +=`, uvicorn the URL's: 60-76 MB per
socket and a busy event loop by the 10 s header deadline), and its connection cap counted every
open socket. This protocol (uvicorn's httptools one), per worker process:

- arms a deadline when a request starts (or the connection opens): 408 and closed when the
  headers are not complete in `header_timeout` seconds, or the body in `body_timeout`;
- meters a request's head as it arrives, before the parser buffers it: past `max_header_kb` it
  answers 414 (the URL is what filled it) or 431, and closes. A chunked body's framing (chunk
  sizes, trailers, which httptools buffers like headers) may take that much plus the body's size;
- counts connections that have sent a request against `max_connections` (beyond, the new
  request is answered the service's JSON 503: a connection already served keeps its place);
- keeps those still sending their first request's headers ("pending") in a bucket of the same
  size, at most `max_pending_per_client` per client (an IPv4 address, an IPv6 /64).

When the pending bucket or a client's share is full, the newcomer is accepted and the oldest
pending connection of the client holding the most (or of the newcomer's own client, past its
share) is closed with the JSON 503. Refusing the newcomer instead, as before, let whoever holds
the bucket lock everyone out: 32 addresses x 32 half-sent sockets got every new connection, token
holders included, a 503. With eviction a flood only churns itself: a client that sends its
request promptly holds one pending place at most, it is never the one chosen while another
client holds more, and it leaves the bucket within a round trip. A flood from as many addresses as
the bucket has places evicts oldest first, so a newcomer still has the time of `max_connections`
newer connections to send its headers. IPv4 addresses are not grouped by prefix (unrelated
clients share a /24 behind a campus or cloud NAT), IPv6 ones are by /64 (one host is given a
whole /64). A request without a valid token is answered 401 before its body is read, and its
connection closed (access gate, errors.py), so slow bodies without a token hold no served place.

Every refusal is counted, and logged at most once per `REPORT_EVERY` seconds per kind with its
true count: a flood made one WARNING line per refusal (3,681 in a minute).
"""

from __future__ import annotations

import asyncio
import http
import ipaddress
import json
import logging
from collections.abc import Mapping
from functools import cache
from typing import NamedTuple

from semhist.kernel.settings import Settings

log = logging.getLogger("semhist.service")

# the settings this guard reads, for a process that must hand its own to it (mcpserver/run.py)
GUARDED = ("header_timeout", "body_timeout", "keep_alive", "max_connections", "max_pending_per_client",
           "max_header_kb")
REPORT_EVERY = 10.0  # seconds between two lines about one kind of refusal
_BODY_STEP = 4096  # a body's bytes are fed in steps of at least this, so the metering stays cheap
_URL_SLACK = 32  # besides the URL, a request line's method, a space and leading blank lines


def _raw(status: int, kind: str, message: str, *extra: tuple[bytes, bytes]) -> tuple[bytes, list]:
    """A JSON error, as the ASGI headers and the bytes of the whole response (connection: close)."""
    body = json.dumps({"error": {"type": kind, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close"), *extra]
    head = f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n".encode()
    return head + b"".join(k + b": " + v + b"\r\n" for k, v in headers) + b"\r\n" + body, headers


_TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
_BUSY, _BUSY_HEADERS = _raw(503, "unavailable", "the service has as many connections as it takes "
                                                "(SEMHIST_MAX_CONNECTIONS): retry", (b"retry-after", b"1"))
_BUSY_BODY = _BUSY.split(b"\r\n\r\n", 1)[1]
_URL_TOO_LONG, _ = _raw(414, "too_large", "the request's URL is longer than the service takes (SEMHIST_MAX_HEADER_KB)")
_HEAD_TOO_LARGE, _ = _raw(431, "too_large", "the request's headers are larger than the service takes "
                                            "(SEMHIST_MAX_HEADER_KB)")


async def _busy(scope, receive, send) -> None:
    """The ASGI answer past the cap: the service's JSON error, then the connection closes."""
    await send({"type": "http.response.start", "status": 503, "headers": _BUSY_HEADERS})
    await send({"type": "http.response.body", "body": _BUSY_BODY})


class Limits(NamedTuple):
    header_s: float
    body_s: float
    connections: int
    per_client: int
    head_bytes: int


@cache
def _limits() -> Limits:
    """From the settings the workers were started with (SEMHIST_*)."""
    s = Settings.load()
    return Limits(s.header_timeout, s.body_timeout, s.max_connections, s.max_pending_per_client,
                  s.max_header_kb * 1024)


def client_of(host: str) -> str:
    """The client a pending connection counts against: its IPv4 address, or its IPv6 /64."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:  # a Unix socket's peer, a scoped address: counted as given
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return host


def room_for_connections(settings: Settings) -> None:
    """Raise this process's open-file limit (its workers inherit it) to what the caps need: a
    worker at its caps holds twice `max_connections` sockets, and past the limit asyncio stops
    accepting anyone for a second at a time. Many systems start services at 1,024."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return
    want = 2 * settings.max_connections + 256  # and the store, the model, the log files
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return
    new = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if new > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    if new < want:
        log.warning("open files are limited to %d: SEMHIST_MAX_CONNECTIONS=%d needs %d (raise `ulimit -n`)",
                    new, settings.max_connections, want)


class _Tally:
    """Refusals of one kind: the first after a quiet spell is logged at once, the rest counted
    and logged once per REPORT_EVERY seconds, with their true count, while they go on."""

    def __init__(self, verb: str, what: str):
        self.verb, self.what, self.count, self.timer = verb, what, 0, None

    def add(self, loop: asyncio.AbstractEventLoop) -> None:
        self.count += 1
        if self.timer is None:
            log.warning("%s 1 connection: %s (more are counted: one line per %.0f s)", self.verb, self.what,
                        REPORT_EVERY)
            self.count = 0
            self.timer = loop.call_later(REPORT_EVERY, self._report, loop)

    def _report(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self.count:
            self.timer = None
            return
        log.warning("%s %d connection%s in the last %.0f s: %s", self.verb, self.count,
                    "" if self.count == 1 else "s", REPORT_EVERY, self.what)
        self.count = 0
        self.timer = loop.call_later(REPORT_EVERY, self._report, loop)


_TALLY = {
    "share": _Tally("closed", "a client past its share of connections still sending headers "
                              "(SEMHIST_MAX_PENDING_PER_CLIENT): its oldest, with 503"),
    "full": _Tally("closed", "connections still sending headers at SEMHIST_MAX_CONNECTIONS: the oldest of the "
                             "client holding the most, with 503"),
    "busy": _Tally("refused", "connections served at SEMHIST_MAX_CONNECTIONS: a new request, with 503"),
    "head": _Tally("refused", "a request head past SEMHIST_MAX_HEADER_KB, with 414 or 431"),
    "late": _Tally("closed", "a request's headers or body past SEMHIST_HEADER_TIMEOUT or SEMHIST_BODY_TIMEOUT, "
                             "with 408"),
}


class _Pending:
    """Connections still sending their first request's headers: in arrival order, by client."""

    def __init__(self):
        self.order: dict = {}  # connection -> client; dicts keep insertion order: oldest first
        self.by_client: dict[str, dict] = {}

    def __len__(self) -> int:
        return len(self.order)

    def add(self, conn, client: str) -> None:
        self.order[conn] = client
        self.by_client.setdefault(client, {})[conn] = None

    def discard(self, conn) -> None:
        client = self.order.pop(conn, None)
        if client is not None:
            mine = self.by_client[client]
            del mine[conn]
            if not mine:
                del self.by_client[client]

    def victim(self, client: str, limits: Limits) -> tuple[object, str] | None:
        """The connection a newcomer from `client` replaces, and why; None when there is room.
        Scans only when full (at most `max_connections` entries)."""
        mine = self.by_client.get(client)
        if mine and len(mine) >= limits.per_client:
            return next(iter(mine)), "share"
        if len(self.order) >= limits.connections:
            most = max(len(c) for c in self.by_client.values())
            return next(c for c, k in self.order.items() if len(self.by_client[k]) == most), "full"
        return None


_PENDING = _Pending()  # per worker process
_SERVED: set = set()


try:  # `uvicorn[standard]` brings httptools on CPython
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - a platform without its wheels
    HttpToolsProtocol = None


def guarded_protocol() -> type[asyncio.Protocol] | str:
    """The HTTP protocol for uvicorn: httptools' with deadlines and caps, or (without httptools)
    uvicorn's h11, whose incomplete requests are bounded in size but not in time."""
    if HttpToolsProtocol is None:  # pragma: no cover
        log.warning("httptools is missing: no deadline for a request's headers and body (h11)")
        return "h11"
    return GuardedHttpTools


def uvicorn_options(settings: Settings) -> Mapping[str, object]:
    """What `uvicorn.run` takes from the settings, the same for `semhist serve` and `semhist mcp`."""
    return {"http": guarded_protocol(), "ws": "none",  # an upgrade would hand the socket past the caps
            "timeout_keep_alive": settings.keep_alive,
            # uvicorn's own cap, which only the h11 fallback uses (ours replaces it)
            "limit_concurrency": settings.max_connections,
            "h11_max_incomplete_event_size": settings.max_header_kb * 1024}


if HttpToolsProtocol is not None:
    # module level: uvicorn's worker processes receive it pickled, by name
    class GuardedHttpTools(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None
        _state = "new"  # -> pending -> served; or refused, evicted
        # the request being read: in its head (or between requests), bytes fed to the parser
        # since the previous request ended, of those its body's, and its URL's
        _in_head, _fed, _body, _url = True, 0, 0, 0

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.limit_concurrency = None  # uvicorn's cap counted half-open sockets: ours is below

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            limits = _limits()
            self._client = client_of(self.client[0]) if self.client else ""
            full = _PENDING.victim(self._client, limits)
            if full is not None:
                victim, why = full
                victim._evict(why)
            self._state = "pending"
            _PENDING.add(self, self._client)
            self._arm(limits.header_s)

        def _evict(self, why: str) -> None:
            _PENDING.discard(self)
            if self.transport.is_closing():  # closed by uvicorn (a malformed request): gone already
                return
            self._state = "evicted"
            self._disarm()
            self.transport.write(_BUSY)
            self.transport.close()
            _TALLY[why].add(self.loop)

        def data_received(self, data: bytes) -> None:
            # fed in pieces no larger than the room left, so a head is refused at its limit
            # whatever the size of the reads. A read that ends one request and starts the next
            # (pipelining) feeds the next one's first bytes unmetered: one read, 256 KB at most.
            limit = _limits().head_bytes
            while data and not self.transport.is_closing():
                if self._in_head:
                    room = limit - self._fed
                    if room <= 0:
                        self._too_large()
                        return
                    piece = data[:room]
                else:
                    piece = data[:max(limit + 2 * self._body - self._fed, _BODY_STEP)]
                data = data[len(piece):]
                self._fed += len(piece)
                super().data_received(piece)
                if not self._in_head and self._fed - self._body > limit + self._body:
                    self._too_large()  # a chunked body's framing or trailers past the limit
                    return

        def _too_large(self) -> None:
            in_url = self._in_head and self._url > 0 and self._fed - self._url <= _URL_SLACK
            self._close_with(_URL_TOO_LONG if in_url else _HEAD_TOO_LARGE, "head")

        def on_message_begin(self) -> None:  # a request's first byte (on a kept-alive connection too)
            super().on_message_begin()
            self._url = 0
            if self._deadline is None:
                self._arm(_limits().header_s)

        def on_url(self, url: bytes) -> None:
            self._url += len(url)
            super().on_url(url)

        def on_body(self, body: bytes) -> None:
            self._body += len(body)
            super().on_body(body)

        def on_headers_complete(self) -> None:
            self._disarm()
            self._in_head = False
            over = self._state != "pending" and self._state != "served"  # (pipelined after a refusal)
            if self._state == "pending":  # its first request: a place among the served, if one is free
                _PENDING.discard(self)
                over = len(_SERVED) >= _limits().connections
                self._state = "refused" if over else "served"
                if over:
                    _TALLY["busy"].add(self.loop)
                else:
                    _SERVED.add(self)
            if over:  # uvicorn runs `self.app` for this request: the JSON 503 instead (it closes)
                app, self.app = self.app, _busy
            try:
                super().on_headers_complete()
            finally:
                if over:
                    self.app = app
            if not self.parser.should_upgrade():  # the body has its own deadline, until its end
                self._arm(_limits().body_s)

        def on_message_complete(self) -> None:
            self._disarm()
            self._in_head, self._fed, self._body = True, 0, 0  # the next bytes are the next request's
            super().on_message_complete()

        def connection_lost(self, exc) -> None:
            self._disarm()
            _PENDING.discard(self)
            _SERVED.discard(self)
            self._state = "gone"
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
            if not self.transport.is_closing():
                self._close_with(_TIMED_OUT, "late")

        def _close_with(self, answer: bytes, why: str) -> None:
            _PENDING.discard(self)  # its place is free now, not when the loop reports it lost
            cycle = self.cycle  # None, a finished one (a kept-alive connection), or this request's
            if cycle is None or cycle.response_complete or not cycle.response_started:
                self.transport.write(answer)
            self.transport.close()
            _TALLY[why].add(self.loop)
