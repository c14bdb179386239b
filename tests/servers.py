"""Real servers for the tests, on 127.0.0.1: semhist's own service and agent, a private
PostgreSQL cluster that a test may restart, and an LLM endpoint that misbehaves on purpose."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Process:
    """A semhist command in a subprocess (`semhist serve ...`), ready when `ready_path` answers."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, *, port: int | None = None,
                 ready_path: str = "/healthz", timeout: float = 120.0):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "semhist.cli", *args, "--port", str(self.port)],
                                         env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{args[0]} exited with {self.proc.returncode}:\n{self.output()}")
            try:
                with urllib.request.urlopen(self.url + ready_path, timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{args[0]} did not start within {timeout:.0f} s:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def children(self) -> list[int]:
        """Worker processes of a multi-worker server."""
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True, text=True)
        pids = [int(p) for p in out.stdout.split()]
        return [p for p in pids if "multiprocessing.resource_tracker" not in _cmdline(p)]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pg_bindir() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda p: [int(x) for x in p.parts[-3].split(".") if x.isdigit()])
    return found[-1].parent if found else None


class Cluster:
    """A private PostgreSQL cluster on 127.0.0.1 (from Debian's binaries) that can be stopped
    and started again under its clients."""

    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.base = Path(tempfile.mkdtemp(prefix="semhist-pg-"))  # pytest's tmp dirs are closed to other users
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses to run as root
            subprocess.run(["chown", "-R", "postgres", str(self.base)], check=True)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.data, self.port = self.base / "data", free_port()
        subprocess.run([*self.as_user, str(bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "semhist"],
                       check=True, capture_output=True)
        self.start()
        subprocess.run([str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "semhist",
                        "semhist_test"], check=True, capture_output=True)
        self.url = f"postgresql://semhist@127.0.0.1:{self.port}/semhist_test"

    def _ctl(self, *args: str) -> None:
        subprocess.run([*self.as_user, str(self.bindir / "pg_ctl"), "-D", str(self.data), *args],
                       check=True, capture_output=True)

    def start(self) -> None:
        self._ctl("-w", "-l", str(self.base / "log"), "-o",
                  f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.base} -c fsync=off -c max_connections=200",
                  "start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "stop")

    def remove(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.base, ignore_errors=True)


class _Local:
    """A local HTTP server on 127.0.0.1 on a free port, in a thread of its own."""

    def _start(self, handler: type, path: str) -> None:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{path}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class BadLLM(_Local):
    """An OpenAI-compatible endpoint that misbehaves in one way (`mode`), changeable between
    requests: html, not_json, not_utf8, truncated, no_choices, slow, error500."""

    def __init__(self, mode: str = "html", delay: float = 30.0):
        self.mode, self.delay = mode, delay
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length") or 0))
                body, kind, status = outer.answer()
                if body is None:  # slow: hold the connection past the client's timeout
                    time.sleep(outer.delay)
                    body, kind, status = b"{}", "application/json", 200
                try:
                    self.send_response(status)
                    self.send_header("content-type", kind)
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass

        self._start(Handler, "/v1")

    def answer(self) -> tuple[bytes | None, str, int]:
        reply = {"id": "x", "object": "chat.completion", "created": 0, "model": "bad",
                 "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}]}
        return {
            "html": (b"<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html", 200),
            "not_json": (b"this is not json", "application/json", 200),
            "not_utf8": (b"\xff\xfe\xfa{\"choices\": \xff}", "application/json", 200),
            "truncated": (json.dumps(reply).encode()[:40], "application/json", 200),
            "no_choices": (json.dumps({**reply, "choices": []}).encode(), "application/json", 200),
            "error500": (b'{"error": {"message": "boom"}}', "application/json", 500),
            "slow": (None, "", 0),
        }[self.mode]


class Recorder(_Local):
    """A relay in front of a real OpenAI-compatible server that keeps the body of every
    request it passes on: what semhist forwarded, as the model received it. Answers are the
    model's own, relayed as they arrive (streams included)."""

    def __init__(self, target: str):
        self.bodies: list[dict] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # GET /v1/models: relayed, not kept
                self._relay(urllib.request.Request(target.rstrip("/") + self.path.removeprefix("/v1")))

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                outer.bodies.append(json.loads(body))
                self._relay(urllib.request.Request(target.rstrip("/") + self.path.removeprefix("/v1"), data=body,
                                                   headers={"content-type": "application/json"}, method="POST"))

            def _relay(self, request):
                try:
                    answer = urllib.request.urlopen(request, timeout=600)
                except urllib.error.HTTPError as refused:  # the model's own error answer, relayed too
                    answer = refused
                with answer:
                    self.send_response(answer.status)
                    self.send_header("content-type", answer.headers.get("content-type", "application/json"))
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    while chunk := answer.read1(65536):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.write(b"0\r\n\r\n")

        self._start(Handler, "/v1")


class Canned(_Local):
    """An OpenAI-compatible endpoint that answers every request with the next canned body for
    its route (chat completions or responses) and keeps what it was sent. Only for what no
    model can be made to say (a reply whose tool-call id holds an e-mail address, a field a
    provider adds): answers themselves are the packaged model's (`Recorder`)."""

    def __init__(self, answers: dict[str, list[dict]]):
        self.bodies: list[dict] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                outer.bodies.append(json.loads(self.rfile.read(int(self.headers.get("content-length") or 0))))
                queue = answers["responses" if self.path.endswith("/responses") else "chat"]
                body = json.dumps(queue.pop(0) if len(queue) > 1 else queue[0]).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._start(Handler, "/v1")


class Connector(_Local):
    """A local stand-in for the Teams connector: the endpoint the Agents SDK posts an agent's
    replies to (the activity's serviceUrl). Keeps every activity it is sent, in order."""

    def __init__(self):
        self.activities: list[dict] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                outer.activities.append({"path": self.path, **json.loads(body or b"{}")})
                answer = json.dumps({"id": f"sent-{len(outer.activities)}"}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_PUT = do_POST

        self._start(Handler, "/")
