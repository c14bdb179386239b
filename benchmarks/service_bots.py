"""The bots of the service benchmarks (service_load.py, routing_load.py): a store pre-filled
with their threads, `semhist serve` in a subprocess, and the bots' turns over HTTP (append the
user's message, ask for the context, append the reply) at a human pace."""

from __future__ import annotations

import asyncio
import math
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

from common import ReadyVectors, corpus, rss_mb

ROUTES = ("append", "context")
BUDGET = 2000


def prefill(url: str, data_dir: Path, cache_dir: Path, bots: int, low: int, high: int, seed: int = 0) -> list[int]:
    """Store `bots` threads (bot-0 ...) unless the store holds them already; their sizes."""
    from dataclasses import replace

    from semhist.kernel.model import Thread
    from semhist.kernel.settings import Settings
    from semhist import History

    rng = random.Random(seed)
    sizes = [int(math.exp(rng.uniform(math.log(low), math.log(high)))) for _ in range(bots)]
    history = History(Settings.load(env={}, db=url, data_dir=data_dir, cache_dir=cache_dir, batch_size=1000))
    try:
        held = {t.thread_id: t for t in history.threads()}
        now = datetime.now(timezone.utc)
        # a thread that grew by earlier runs' turns is kept: the turns only ever append
        todo = [(i, n) for i, n in enumerate(sizes) if f"bot-{i}" not in held or held[f"bot-{i}"].messages < n
                or held[f"bot-{i}"].last > now]
        for i, _ in todo:
            if f"bot-{i}" in held:
                history.forget(f"bot-{i}")
        if not todo:
            settle(url)
            return sizes
        messages, vectors, _ = corpus(max(sizes) + bots * 37, cache_dir)
        real = history.parts.ingestor.embedder
        end = datetime.now(timezone.utc) - timedelta(hours=1)
        for i, n in todo:
            start = i * 37  # each thread its own stretch of the corpus, ending an hour ago (the turns come after)
            part = messages[start:start + n]
            shift = end - part[-1].timestamp
            msgs = [replace(m, index=k, timestamp=m.timestamp + shift) for k, m in enumerate(part)]
            history.parts.ingestor.embedder = ReadyVectors(vectors[start:start + n], real.dim,
                                                           history.parts.embedder.id)
            history.ingest(f"bot-{i}", Thread(f"bot-{i}", tuple(msgs)))
            print(f"  pre-filled bot-{i}: {n} messages", file=sys.stderr, flush=True)
        history.parts.ingestor.embedder = real
    finally:
        history.close()
    settle(url)
    return sizes


def settle(url: str) -> None:
    """A store in its steady state, not one still digesting a bulk load: PostgreSQL's
    autovacuum and checkpoint after 100k inserts otherwise run during the measurement (seen:
    the first case after a fresh pre-fill, 2.9 s p50 against 38 ms run again later)."""
    if url.startswith("postgres"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
            deadline = time.monotonic() + 900
            while time.monotonic() < deadline and conn.execute(
                    "SELECT COUNT(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'").fetchone()[0]:
                time.sleep(5)
            conn.execute("CHECKPOINT")


class Server:
    def __init__(self, url: str, data_dir: Path, cache_dir: Path, workers: int, log: Path):
        with socket_port() as port:
            self.port = port
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "SEMHIST_DB": url, "SEMHIST_DATA_DIR": str(data_dir),
                    "SEMHIST_CACHE_DIR": str(cache_dir)}
        self.workers_wanted = workers
        self.log = open(log, "wb")
        self.start()

    def start(self) -> None:
        workers = self.workers_wanted
        self.proc = subprocess.Popen([sys.executable, "-m", "semhist.cli", "serve", "--workers", str(workers),
                                      "--port", str(self.port)], env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.base + "/healthz", timeout=2):
                    if len(self.workers()) >= workers:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise SystemExit(f"the server did not start; see {self.log.name}")

    def kill(self) -> None:
        """No goodbye (SIGKILL to it and its workers): what a crash or an evicted pod does."""
        for pid in self.workers():
            if pid != self.proc.pid:
                os.kill(pid, signal.SIGKILL)
        self.proc.kill()
        self.proc.wait()

    def workers(self) -> list[int]:
        out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(self.proc.pid)], capture_output=True, text=True)
        pids = [int(line.split()[0]) for line in out.stdout.splitlines() if "resource_tracker" not in line]
        return pids or [self.proc.pid]

    def rss_mb(self) -> list[float]:
        return [round(mb, 1) for mb in map(rss_mb, self.workers()) if mb == mb]  # NaN: no VmRSS line

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


class socket_port:
    def __enter__(self) -> int:
        import socket

        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        return self.s.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.s.close()


async def _post(client, path: str, body: dict, errors: list[str], route: str) -> bool:
    try:
        r = await client.post(path, json=body)
    except Exception as exc:  # noqa: BLE001 - a benchmark counts every failure
        errors.append(f"{route} {type(exc).__name__}: {exc}")
        return False
    if r.status_code not in (200, 201):
        errors.append(f"{route} {r.status_code} {r.text[:120]}")
    return r.status_code in (200, 201)


async def bot(client, n: int, pace: float, until: float, texts: list[str], questions: list[str], rng: random.Random,
              timings: dict[str, list[float]], errors: list[str], turns: list[int],
              acked: list[str] | None = None, retry: float = 0.0) -> None:
    """One bot's turns. A write that fails is sent again with its id for up to `retry` seconds
    (what a bot does; the id makes it count once); `acked` collects the ids stored."""
    thread = f"bot-{n}"
    turn = 0
    while True:
        gap = rng.expovariate(1 / pace)
        if time.monotonic() + gap >= until:
            return
        await asyncio.sleep(gap)
        turn += 1
        tag = f"{n}.{turn}.{rng.random():.6f}"
        steps = [("append", f"/v1/threads/{thread}/messages",
                  {"messages": [{"role": "user", "content": f"{rng.choice(texts)} ({tag})", "id": f"u{tag}"}]}),
                 ("context", f"/v1/threads/{thread}/context", {"request": f"{rng.choice(questions)} ({tag})",
                                                              "budget": BUDGET}),
                 ("append", f"/v1/threads/{thread}/messages",
                  {"messages": [{"role": "assistant", "content": f"{rng.choice(texts)} ({tag})", "id": f"a{tag}"}]})]
        for route, path, body in steps:
            began = time.perf_counter()
            ok = await _post(client, path, body, errors, route)
            give_up = time.monotonic() + (retry if route == "append" else 0.0)
            while not ok and time.monotonic() < give_up:
                await asyncio.sleep(0.5)
                ok = await _post(client, path, body, errors, "retried " + route)
            if ok:
                timings[route].append((time.perf_counter() - began) * 1000)
                if route == "append" and acked is not None:
                    acked.append(body["messages"][0]["id"])
        turns.append(1)


async def run(base: str, bots: int, pace: float, duration: float, texts, questions, seed: int,
              acked: list[str] | None = None, retry: float = 0.0):
    timings: dict[str, list[float]] = {r: [] for r in ROUTES}
    errors: list[str] = []
    turns: list[int] = []
    rngs = [random.Random(seed * 1000 + i) for i in range(bots)]
    async with client_for(base, bots) as client:
        began = time.monotonic()
        await asyncio.gather(*(bot(client, i, pace, began + duration, texts, questions, rngs[i], timings, errors,
                                   turns, acked, retry) for i in range(bots)))
        took = time.monotonic() - began
    return timings, errors, len(turns) / took


def client_for(base: str, bots: int):
    import httpx

    limits = httpx.Limits(max_connections=bots, max_keepalive_connections=bots)
    return httpx.AsyncClient(base_url=base, timeout=60, limits=limits)


def loads(metrics: str) -> float:
    return sum(float(line.split()[1]) for line in metrics.splitlines() if line.startswith("semhist_thread_loads_total"))
