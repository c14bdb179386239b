"""The HTTP front of `semhist llm-server`: llama.cpp's server runs on a private loopback port
and every request is relayed to it as it is (streams chunk by chunk), except a chat completion
that offers tools: that one is asked whole and its reply read for calls the model wrote as text
(toolcalls.py), then returned whole or as a stream, as the client asked."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.error
import urllib.request

from .toolcalls import as_events, with_tool_calls

TIMEOUT = 600.0  # seconds for one answer of the packaged model on two cores


class Front:
    def __init__(self, host: str, port: int, backend: str):
        self.server = http.server.ThreadingHTTPServer((host, port), _handler(backend.rstrip("/")))
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True, name="llm-front").start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(backend: str):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # each streamed token is one small write: without this, Nagle's algorithm holds it until
        # the client's delayed ACK (up to 40 ms on Linux)
        disable_nagle_algorithm = True

        def log_message(self, *args):  # llama.cpp logs each request already
            pass

        def do_GET(self):
            self._relay(urllib.request.Request(backend + self.path, headers=self._passed()))

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            data = _json(body) if self.path.split("?")[0].rstrip("/").endswith("/chat/completions") else None
            if isinstance(data, dict) and data.get("tools"):
                self._with_tools(data)
                return
            self._relay(urllib.request.Request(backend + self.path, data=body, headers=self._passed(),
                                               method="POST"))

        def _passed(self) -> dict[str, str]:
            return {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}

        def _with_tools(self, data: dict) -> None:
            streamed = bool(data.get("stream"))
            asked = {k: v for k, v in data.items() if k not in ("stream", "stream_options")}
            request = urllib.request.Request(backend + self.path, data=json.dumps(asked).encode(),
                                             headers={"content-type": "application/json"}, method="POST")
            try:
                answer = urllib.request.urlopen(request, timeout=TIMEOUT)
            except urllib.error.HTTPError as refused:  # the server's own error, as it said it
                self._send(refused.status, refused.headers.get("content-type", "application/json"), refused.read())
                return
            with answer:
                reply = with_tool_calls(json.loads(answer.read()), data["tools"])
            if streamed:
                self._send(200, "text/event-stream", b"".join(as_events(reply)))
            else:
                self._send(200, "application/json", json.dumps(reply, ensure_ascii=False).encode())

        def _send(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _relay(self, request: urllib.request.Request) -> None:
            try:
                answer = urllib.request.urlopen(request, timeout=TIMEOUT)
            except urllib.error.HTTPError as refused:
                answer = refused
            except OSError:
                self._send(503, "application/json", b'{"error": {"message": "the model is not up yet", "code": 503}}')
                return
            with answer:
                self.send_response(answer.status)
                self.send_header("content-type", answer.headers.get("content-type", "application/json"))
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                while chunk := answer.read1(65536):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

    return Handler


def _json(body: bytes):
    try:
        return json.loads(body)
    except ValueError:
        return None
