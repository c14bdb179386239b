"""Smoke test of semhist as its users install it: the extras without the test extra.

Run with the python of a virtualenv that holds what a user installs and nothing else: no pytest,
no httpx unless an extra brings it.

    python .ci/smoke_extras.py service   # after pip install -e '.[service,local-llm]'
    python .ci/smoke_extras.py           # after the README's pip install -e '.[service,teams,...]'

`service` starts the packaged local model (`semhist llm-server`) and `semhist serve` in front of it
and sends one chat completion through the official `openai` client. The default, `all`, does that,
sends one Teams activity through `semhist agent`, and imports the framework adapters and what the
postgres and eval extras bring. Servers listen on 127.0.0.1 only and are all stopped at the end.
The service is checked alone first because the other extras' dependencies (LangChain's,
LlamaIndex's) can bring in a package the service needs but its extra forgot. A missing dependency
fails it with one line saying what broke, and a non-zero exit.

Optional: SEMHIST_SMOKE_POSTGRES_URL, an empty PostgreSQL database for `semhist serve` (the
`postgres` extra's driver then does real work); without it the service uses SQLite.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request
from pathlib import Path

MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m"
LLM_START = 900.0  # the first start assembles the 1.1 GB model from its parts (once per cache)
SERVER_START = 180.0
ANSWER = 600.0  # a 1.5B model on two busy cores


class SmokeFailure(Exception):
    """One line: what broke."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def semhist_command() -> str:
    """The console script of this virtualenv: what a user types."""
    script = Path(sys.executable).parent / "semhist"
    if not script.exists():
        raise SmokeFailure(f"no semhist command next to {sys.executable}: is semhist installed here?")
    return str(script)


class Server:
    """A `semhist` subcommand on 127.0.0.1, ready when `ready_path` answers 200."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], workdir: Path, ready_path: str,
                 timeout: float):
        self.name, self.port = name, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"{name}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([semhist_command(), *args, "--host", "127.0.0.1", "--port", str(self.port)],
                                         env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        self._wait(ready_path, timeout)

    def _wait(self, path: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SmokeFailure(f"{self.name} exited with {self.proc.returncode} while starting: "
                                   f"{self.last_line()}")
            try:
                with urllib.request.urlopen(self.url + path, timeout=5) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise SmokeFailure(f"{self.name} did not answer {path} within {timeout:.0f} s: {self.last_line()}")

    def last_line(self) -> str:
        lines = [x for x in self.log.read_text(errors="replace").splitlines() if x.strip()]
        return lines[-1].strip() if lines else "(no output)"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class ConnectorStandIn:
    """The Bot Connector a Teams activity's serviceUrl names, on 127.0.0.1: it keeps every
    activity the agent sends back and answers as the connector does."""

    def __init__(self):
        self.sent: list[dict] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                outer.sent.append({"path": self.path, **json.loads(body or b"{}")})
                reply = json.dumps({"id": f"reply-{len(outer.sent)}"}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def get_json(url: str, timeout: float = 30.0):
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return json.loads(reply.read())


def post_json(url: str, body: dict, timeout: float) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


IMPORTS = {  # extra: what its users import or run first
    "service": "import semhist.service.proxy",
    "teams": "from semhist.agent.host import _sdk; _sdk()",
    "langchain": "from semhist.integrations.langchain import history_factory, pre_model_hook; "
                 "from semhist.integrations.langchain_agents import SemhistMiddleware",
    "langgraph": "from langgraph.prebuilt import create_react_agent",
    "llamaindex": "from semhist.integrations.llamaindex import SemhistMemory, SemhistMemoryBlock",
    "agent-framework": "from semhist.integrations.agent_framework import SemhistContextProvider; "
                       "from agent_framework.openai import OpenAIChatCompletionClient; "
                       "from semhist.agent.framework import FrameworkAnswers",
    "openai-agents": "from semhist.integrations.openai_agents import SemhistSession",
    "mcp": "from semhist.mcpserver.tools import build",
    "postgres": "from semhist.indexers.store.postgres import _psycopg; _psycopg().pq.version()",
    "eval": "from semhist.scoring import answer_f1; answer_f1('ramen in Sapporo', 'Sapporo ramen')",
}


def check_imports(extras: list[str]) -> None:
    for extra in extras:
        code = IMPORTS[extra]
        try:
            exec(code, {})
        except Exception as exc:
            raise SmokeFailure(f"[{extra}] {code.split(';')[0]}: {type(exc).__name__}: {exc}") from exc
    print(f"imports ({', '.join(extras)}): ok", flush=True)


def chat_through_service(service: Server, db: str | None) -> None:
    """One turn through semhist's OpenAI-compatible route with the official client; with `db`,
    the turn is read back from that PostgreSQL database too."""
    from openai import OpenAI

    thread = "smoke-extras-chat"
    client = OpenAI(base_url=service.url + "/v1", api_key="unused", timeout=ANSWER, max_retries=0,
                    default_headers={"X-Semhist-Thread": thread})
    try:
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, max_tokens=4, temperature=0,
            messages=[{"role": "user", "content": "Say OK."}])
    except Exception as exc:
        raise SmokeFailure(f"POST /v1/chat/completions through the openai client: {type(exc).__name__}: "
                           f"{str(exc)[:300]} (service log: {service.last_line()})") from exc
    reply = raw.parse()
    if not reply.choices or reply.choices[0].message is None:
        raise SmokeFailure(f"the chat completion has no choice: {raw.http_response.text[:300]}")
    threads = {t["thread"]: t["messages"] for t in get_json(service.url + "/v1/threads")}
    if threads.get(thread) != 2:
        raise SmokeFailure(f"thread {thread} should hold the turn and the reply (2 messages), holds "
                           f"{threads.get(thread)}; X-Semhist-Stored={raw.headers.get('x-semhist-stored')}")
    if db:
        from semhist.indexers.store import open_store

        store = open_store(db)
        try:
            in_db = len(store.messages(thread)) if store.has_thread(thread) else 0
        finally:
            store.close()
        if in_db != 2:
            raise SmokeFailure(f"PostgreSQL holds {in_db} messages of thread {thread}, not 2")
    print(f"chat completion through semhist serve: ok (reply {reply.choices[0].message.content!r}, "
          f"thread stored: 2 messages in {'PostgreSQL' if db else 'SQLite'})", flush=True)


def inspector(service: Server) -> None:
    """The inspector's page and its search, as `pip install 'semhist[service]'` ships them."""
    with urllib.request.urlopen(service.url + "/ui/", timeout=30) as page, \
            urllib.request.urlopen(service.url + "/ui/app.js", timeout=30) as script:
        html, js = page.read().decode(), script.read()
    if "app.js" not in html or not js:
        raise SmokeFailure("GET /ui/ should serve the inspector's page and its script from the package")
    status, body = post_json(service.url + "/v1/threads/smoke-extras-chat/search", {"query": "OK"}, 60)
    if status != 200 or not json.loads(body)["hits"]:
        raise SmokeFailure(f"POST /v1/threads/smoke-extras-chat/search: {status} {body[:300]!r}")
    print("inspector page and search: ok", flush=True)


def wait_until(check, seconds: float):
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def _stored_messages(path: Path) -> int | None:
    import sqlite3

    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    except sqlite3.Error:
        return None


def teams_activity(agent: Server, connector: ConnectorStandIn, data_dir: Path) -> None:
    """One Teams message activity; the agent answers through the activity's serviceUrl."""
    conversation = "19:smoke@thread.tacv2;messageid=1"
    activity = {
        "type": "message", "id": "1722211200000", "timestamp": "2026-11-30T09:00:00.1234567Z",
        "channelId": "msteams", "serviceUrl": connector.url, "text": "Say OK.",
        "from": {"id": "29:user-taro", "name": "Taro", "role": "user"},
        "conversation": {"id": conversation, "conversationType": "channel", "tenantId": "tenant"},
        "recipient": {"id": "28:semhist-bot", "name": "semhist"},
        "channelData": {"tenant": {"id": "tenant"}, "teamsChannelId": "19:abc@thread.tacv2"},
    }
    status, body = post_json(agent.url + "/api/messages", activity, timeout=ANSWER)
    if status not in (200, 201, 202):
        raise SmokeFailure(f"POST /api/messages answered {status}: {body[:300]!r} (agent log: {agent.last_line()})")
    # in a channel the answer comes in the turn, or after an acknowledgement as a proactive message
    answers = wait_until(lambda: [a for a in connector.sent if a.get("type") == "message" and a.get("text")
                                  and not a["text"].startswith("Working on it")], ANSWER)
    if not answers:
        raise SmokeFailure(f"the agent sent no answer to the serviceUrl (got {connector.sent[:3]}; "
                           f"agent log: {agent.last_line()})")
    replies = answers
    # the store holds the activity and the answer (an acknowledgement is not history); /healthz
    # gives no counts, so the store's file is read
    stored = wait_until(lambda: _stored_messages(data_dir / "semhist.sqlite3") == 2, 30)
    if not stored:
        raise SmokeFailure(f"the agent's store should hold the activity and the answer (2 messages): "
                           f"{_stored_messages(data_dir / 'semhist.sqlite3')}")
    print(f"Teams activity through semhist agent: ok (reply {replies[0]['text'][:60]!r}, stored: 2 messages)",
          flush=True)


def run(workdir: Path, everything: bool) -> None:
    check_imports(list(IMPORTS) if everything else ["service"])
    servers: list[Server] = []
    connector = ConnectorStandIn()
    try:
        llm = Server("llm-server", ["llm-server", "--threads", str(min(2, os.cpu_count() or 1))], {}, workdir,
                     "/health", LLM_START)
        servers.append(llm)
        db = os.environ.get("SEMHIST_SMOKE_POSTGRES_URL") if everything else None
        service = Server("serve", ["serve", "--upstream", llm.url + "/v1", *(["--db", db] if db else [])],
                         {"SEMHIST_DATA_DIR": str(workdir / "serve")}, workdir, "/healthz", SERVER_START)
        servers.append(service)
        chat_through_service(service, db)
        inspector(service)
        if not everything:
            return
        llm_env = {"OPENAI_BASE_URL": llm.url + "/v1", "OPENAI_API_KEY": "local", "SEMHIST_LLM_MODEL": MODEL,
                   "SEMHIST_LLM_TIMEOUT": str(ANSWER), "SEMHIST_KEYWORD": "local", "SEMHIST_ANSWER_TOKENS": "4"}
        agent = Server("agent", ["agent", "--anonymous"], {**llm_env, "SEMHIST_DATA_DIR": str(workdir / "agent")},
                       workdir, "/healthz", SERVER_START)
        servers.append(agent)
        teams_activity(agent, connector, workdir / "agent")
    finally:
        for server in reversed(servers):
            server.stop()
        connector.close()


def main(argv: list[str]) -> int:
    if argv not in ([], ["all"], ["service"]):
        print("usage: smoke_extras.py [all|service]", file=sys.stderr)
        return 2
    everything = argv != ["service"]
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_API_KEY"):
        os.environ.pop(var, None)  # only the local model is ever called
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="semhist-smoke-") as tmp:
        try:
            run(Path(tmp), everything)
        except SmokeFailure as exc:
            print(f"smoke_extras: FAIL: {exc}", file=sys.stderr, flush=True)
            return 1
        except Exception as exc:  # a bug of this script or of a library: the trace, then the one line
            traceback.print_exc()
            print(f"smoke_extras: FAIL: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return 1
    print(f"smoke_extras ({'all' if everything else 'service'}): ok in {time.monotonic() - began:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
