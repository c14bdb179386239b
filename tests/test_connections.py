"""The service closes what it opens: idle, half-sent and slow-body connections are closed within
their deadlines while other clients are served without errors (raw sockets on 127.0.0.1,
bounded counts)."""

from __future__ import annotations

import json
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
           "SEMHIST_KEEP_ALIVE": str(IDLE), "SEMHIST_MAX_CONNECTIONS": "200", "SEMHIST_MAX_PENDING_PER_CLIENT": "64"}
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


CAP, PER_CLIENT = 40, 8


@pytest.fixture(scope="module")
def capped(tmp_path_factory, cache_dir):
    base = tmp_path_factory.mktemp("capped")
    env = {"SEMHIST_DATA_DIR": str(base / "data"), "SEMHIST_CACHE_DIR": str(cache_dir),
           "SEMHIST_HEADER_TIMEOUT": "20", "SEMHIST_KEEP_ALIVE": "20", "SEMHIST_MAX_CONNECTIONS": str(CAP),
           "SEMHIST_MAX_PENDING_PER_CLIENT": str(PER_CLIENT)}
    server = Process(["serve"], env, base / "serve.log")
    yield server
    server.stop()
    assert "Traceback" not in server.output(), server.output()


def _open_from(url: str, local: str, first: bytes = b"") -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30, source_address=(local, 0))
    if first:
        sock.sendall(first)
    return sock


def _answer(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    said = b""
    try:
        while chunk := sock.recv(4096):
            said += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    return said


def test_half_open_sockets_cannot_lock_out_a_client_that_sends_requests(capped):
    """At SEMHIST_MAX_CONNECTIONS, 40 half-sent sockets (no token needed) used to lock every
    client out until the header deadline, and the answer was uvicorn's plain text."""
    half = [_open_from(capped.url, "127.0.0.1", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ") for _ in range(CAP)]
    try:
        time.sleep(0.5)
        answers = []
        for sock in half[PER_CLIENT:]:  # past its address's share: answered and closed at once
            answers.append(_answer(sock))
        assert len(answers) == CAP - PER_CLIENT and all(a.startswith(b"HTTP/1.1 503") for a in answers)
        body = answers[0].split(b"\r\n\r\n", 1)[1]
        assert b"application/json" in answers[0] and json.loads(body)["error"]["type"] == "unavailable"
        # another client is served meanwhile
        other = httpx.Client(base_url=capped.url, timeout=10, transport=httpx.HTTPTransport(local_address="127.0.0.2"))
        with other:
            assert other.get("/healthz").status_code == 200
    finally:
        for sock in half:
            sock.close()


def test_past_the_connection_cap_the_answer_is_the_services_json_error(capped):
    kept = []
    try:
        for k in range(CAP):  # each sends a request and stays open (kept alive)
            sock = _open_from(capped.url, f"127.0.1.{k % 4 + 1}", b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.settimeout(10)
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
            kept.append(sock)
        over = httpx.get(capped.url + "/healthz", timeout=10)
        assert over.status_code == 503 and over.json()["error"]["type"] == "unavailable", over.text
        kept[0].sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # a served client keeps its place
        assert kept[0].recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        for sock in kept:
            sock.close()
    time.sleep(0.5)
    assert httpx.get(capped.url + "/healthz", timeout=10).status_code == 200  # places come back
