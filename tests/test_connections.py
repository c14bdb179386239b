"""The service closes what it opens: idle, half-sent and slow-body connections are closed within
their deadlines while other clients are served without errors (raw sockets on 127.0.0.1,
bounded counts)."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from .servers import Process

pytestmark = pytest.mark.slow

HEADER, BODY, IDLE = 2.0, 3.0, 2.0


@pytest.fixture(scope="module")
def guarded(tmp_path_factory, cache_dir):
    base = tmp_path_factory.mktemp("guarded")
    env = {"SEMHIST_DATA_DIR": str(base / "data"), "SEMHIST_CACHE_DIR": str(cache_dir),
           "SEMHIST_HEADER_TIMEOUT": str(HEADER), "SEMHIST_BODY_TIMEOUT": str(BODY),
           "SEMHIST_KEEP_ALIVE": str(IDLE), "SEMHIST_MAX_CONNECTIONS": "200"}
    server = Process(["serve"], env, base / "serve.log")
    yield server
    server.stop()
    assert "Traceback" not in server.output(), server.output()


def _open(url: str, first: bytes = b"") -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    if first:
        sock.sendall(first)
    return sock


def _closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Whether the server closed `sock` within `seconds`, and what it said before."""
    sock.settimeout(seconds)
    said = b""
    try:
        while chunk := sock.recv(4096):
            said += chunk
        return True, said
    except ConnectionResetError:
        return True, said
    except socket.timeout:
        return False, said
    finally:
        sock.close()


def test_idle_half_sent_and_slow_clients_are_closed_and_others_served(guarded):
    idle = [_open(guarded.url) for _ in range(15)]  # connected, never a byte
    half = [_open(guarded.url, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ") for _ in range(10)]
    body = [_open(guarded.url, b"POST /v1/threads/t/messages HTTP/1.1\r\nHost: x\r\ncontent-type: application/json"
                               b"\r\ncontent-length: 500\r\n\r\n{\"messages\": [") for _ in range(5)]
    kept = []
    for _ in range(5):  # a finished request, then the connection left open
        sock = _open(guarded.url, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        kept.append(sock)
    served, errors, stop = [], [], threading.Event()

    def client():
        with httpx.Client(base_url=guarded.url, timeout=30) as http:
            while not stop.is_set():
                try:
                    served.append(http.get("/healthz").status_code)
                except httpx.HTTPError as exc:
                    errors.append(repr(exc))
                time.sleep(0.05)

    worker = threading.Thread(target=client)
    worker.start()
    began = time.monotonic()
    results = {"idle": [_closed_within(s, HEADER + 3) for s in idle],
               "half-sent headers": [_closed_within(s, HEADER + 3) for s in half],
               "slow body": [_closed_within(s, BODY + 3) for s in body],
               "kept alive": [_closed_within(s, IDLE + 3) for s in kept]}
    stop.set()
    worker.join()
    assert time.monotonic() - began < HEADER + BODY + IDLE + 12
    for kind, outcomes in results.items():
        assert all(closed for closed, _ in outcomes), (kind, outcomes)
    assert all(said.startswith(b"HTTP/1.1 408") for _, said in results["half-sent headers"] + results["slow body"])
    assert not errors and len(served) > 10 and set(served) == {200}, (errors, set(served))
