"""Three `semhist serve` replicas on one PostgreSQL behind HAProxy: hashing on the thread
against round robin, under the bots' load.

    python benchmarks/routing_load.py --db postgresql://USER@127.0.0.1:PORT/SCRATCH_DB
    python benchmarks/routing_load.py --db ... --bots 1000 --min-messages 100 --max-messages 3000

The store is pre-filled as in service_load.py (--bots threads, log-uniform sizes, LoCoMo text
with precomputed vectors). Each case then starts three fresh replicas (one worker each, nothing
cached) and HAProxy on 127.0.0.1 with docs/samples/haproxy.cfg as the docs give it, or with
`balance roundrobin` in place of its hash, and runs the bots' turns (append the user's message,
ask for the context at 2,000 tokens, append the reply) at a human pace for --duration seconds.
Reported per case: turns/s, the replicas' thread loads (a load reads a thread's state from the
store) per context request, context and append latency, errors. The load generator, the
replicas, HAProxy and PostgreSQL share the machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from common import ROOT, add_data, add_out, data_file, out_file, pct, write_json
from service_bots import Server, loads, prefill, run, settle, socket_port

CONFIG = ROOT / "docs" / "samples" / "haproxy.cfg"
HASH = "balance hash var(txn.thread)"
CRASH = "hash-crash"  # the case --kill-after adds


class Balancer:
    """haproxy in the foreground with the documented config (or round robin in its place)."""

    def __init__(self, replicas: list[Server], balance: str, workdir: Path, name: str = ""):
        text = CONFIG.read_text()
        if HASH not in text:
            raise SystemExit(f"{CONFIG} no longer says {HASH!r}")
        name = name or balance
        config = workdir / f"haproxy-{name}.cfg"
        config.write_text(text if balance == "hash" else text.replace(HASH, "balance roundrobin"))
        with socket_port() as port:
            self.base = f"http://127.0.0.1:{port}"
        env = {**os.environ, "SEMHIST_LB_BIND": self.base.removeprefix("http://"),
               **{f"SEMHIST_REPLICA_{i}": f"127.0.0.1:{r.port}" for i, r in enumerate(replicas, 1)}}
        self.log = open(workdir / f"haproxy-{name}.log", "wb")
        self.proc = subprocess.Popen([shutil.which("haproxy") or "/usr/sbin/haproxy", "-db", "-f", str(config)],
                                     env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.base + "/healthz", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        raise SystemExit(f"haproxy did not start; see {workdir}/haproxy-{name}.log")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.log.close()


def thread_loads(replicas: list[Server]) -> float:
    return sum(loads(urllib.request.urlopen(r.base + "/metrics").read().decode()) for r in replicas)


def requests_served(server: Server) -> float:
    text = urllib.request.urlopen(server.base + "/metrics").read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("semhist_http_requests_total"))


def crash(replica: Server, after: float, down: float, events: dict) -> threading.Thread:
    """SIGKILL the replica `after` seconds into the run, start it again `down` seconds later."""
    def go() -> None:
        time.sleep(after)
        events["loads_before_kill"] = thread_loads([replica])  # its counter dies with it
        replica.kill()
        events["killed"] = time.monotonic()
        time.sleep(down)
        replica.start()
        events["back"] = time.monotonic()
    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


def stored(url: str, ids: list[str]) -> tuple[int, int]:
    """(messages stored under these ids, of them stored more than once)."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT COUNT(*), COUNT(*) - COUNT(DISTINCT (thread_id, source_key)) FROM messages "
                           "WHERE source_key = ANY(%s)", (ids,)).fetchone()
    return int(row[0]), int(row[1])


def case(args, url: str, balance: str, workdir: Path, cache_dir: Path, texts, questions) -> dict:
    replicas: list[Server] = []
    balancer = None
    kill = balance == CRASH  # hashing, one replica SIGKILLed and started again
    acked: list[str] = []
    events: dict = {}
    try:
        for i in range(3):
            data = workdir / f"{balance}-replica{i + 1}"
            data.mkdir(exist_ok=True)
            replicas.append(Server(url, data, cache_dir, 1, data / "serve.log"))
        balancer = Balancer(replicas, "hash" if kill else balance, workdir, name=balance)
        before = thread_loads(replicas)
        crasher = crash(replicas[0], args.kill_after, args.down, events) if kill else None
        timings, errors, rate = asyncio.run(run(balancer.base, args.bots, args.pace, args.duration, texts,
                                                questions, seed=1, acked=acked, retry=60.0))
        if crasher is not None:
            crasher.join()
        loaded = thread_loads(replicas) - before + events.get("loads_before_kill", 0.0)
        back = requests_served(replicas[0]) if kill else None  # counted since its restart
    finally:
        if balancer:
            balancer.stop()
        for r in replicas:
            r.stop()
    asks = len(timings["context"])
    extra = {}
    if kill:
        held, twice = stored(url, acked)
        extra = {"crash": {"killed_at_s": args.kill_after, "down_s": args.down, "writes_acknowledged": len(acked),
                           "stored": held, "lost": len(acked) - held, "stored_twice": twice,
                           "failed_attempts": sum(not e.startswith("retried") for e in errors),
                           "failed_retries": sum(e.startswith("retried") for e in errors),
                           "served_after_restart": back}}
    return {**extra, "balance": balance, "bots": args.bots, "turns_per_s": round(rate, 2), "context_requests": asks,
            "thread_loads": loaded, "loads_per_ask": round(loaded / asks, 3) if asks else None,
            "errors": len(errors), "error_sample": errors[:3],
            **{route: {"p50": pct(v, 50, 1), "p95": pct(v, 95, 1), "p99": pct(v, 99, 1)} for route, v in timings.items()}}


def report(result: dict) -> str:
    a = result["args"]
    lines = ["# Three replicas behind HAProxy: hashing on the thread against round robin", "",
             f"`python benchmarks/routing_load.py {result['command']}` — {a['bots']} bots, each on its own thread "
             f"({a['min_messages']:,}–{a['max_messages']:,} messages, {result['messages_prefilled']:,} in all), a turn "
             f"every {a['pace']} s per bot on average for {a['duration']:.0f} s; three fresh `semhist serve` (one "
             f"worker each, the default cache) on one PostgreSQL; {result['cores']} cores shared by everything.", "",
             "| balance | turns/s | context requests | thread loads | loads per context request | "
             "context p50 / p95 / p99 ms | append p50 / p95 ms | errors |", "|---|---|---|---|---|---|---|---|"]
    for r in result["cases"]:
        c, ap = r["context"], r["append"]
        lines.append(f"| {r['balance']} | {r['turns_per_s']} | {r['context_requests']:,} | {r['thread_loads']:,.0f} | "
                     f"{r['loads_per_ask']} | {c['p50']} / {c['p95']} / {c['p99']} | {ap['p50']} / {ap['p95']} | "
                     f"{r['errors']} |")
    for r in result["cases"]:
        if "crash" in r:
            k = r["crash"]
            lines += ["", f"`{r['balance']}`: hashing, one replica SIGKILLed {k['killed_at_s']:.0f} s into the run and "
                      "started again "
                      f"{k['down_s']:.0f} s later, the bots sending a failed write again with its id (up to 60 s): "
                      f"{k['writes_acknowledged']:,} writes acknowledged, {k['stored']:,} stored, **{k['lost']} lost**, "
                      f"{k['stored_twice']} stored twice (requests that failed: {k['failed_attempts']} first attempts, "
                      f"{k['failed_retries']} retries); the restarted replica served "
                      f"{k['served_after_restart']:,.0f} requests after it came back (its threads came home). "
                      "Its thread loads count those before the kill and those after the restart."]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", required=True, help="postgresql://... (a scratch database)")
    p.add_argument("--bots", type=int, default=300)
    p.add_argument("--min-messages", type=int, default=100)
    p.add_argument("--max-messages", type=int, default=3000)
    p.add_argument("--pace", type=float, default=20.0, help="mean seconds between a bot's turns")
    p.add_argument("--duration", type=float, default=120.0)
    p.add_argument("--balance", default="hash,roundrobin")
    p.add_argument("--kill-after", type=float, metavar="S", help="add a hashed run whose first replica is SIGKILLed "
                   "S seconds in and started again --down seconds later; bots send failed writes again with their ids")
    p.add_argument("--down", type=float, default=10.0)
    p.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "semhist-routing-load"))
    add_out(p)
    add_data(p)
    args = p.parse_args()
    from semhist.indexers.loader import load
    from semhist.kernel.settings import Settings

    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    cache_dir = Settings.load().cache_dir  # the LoCoMo vectors are cached there
    sizes = prefill(args.db, workdir, cache_dir, args.bots, args.min_messages, args.max_messages)
    settle(args.db)
    threads = load(data_file("locomo.jsonl")).threads
    texts = [m.content for t in threads for m in t.messages if m.role != "system"][:5000]
    questions = [q.text for t in threads for q in t.queries if q.has_evidence]
    balances = args.balance.split(",") + ([CRASH] if args.kill_after is not None else [])
    cases = [case(args, args.db, b, workdir, cache_dir, texts, questions) for b in balances]
    command = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
                       if k not in ("out", "db", "workdir") and v != p.get_default(k))
    result = {"args": {k: v for k, v in vars(args).items() if k not in ("out", "db")}, "cases": cases,
              "command": ("--db postgresql://... " + command).strip(), "messages_prefilled": sum(sizes),
              "cores": os.cpu_count()}
    write_json(out_file(args.out, "routing_load.json"), result)
    (args.out / "routing_load.md").write_text(report(result), encoding="utf-8")
    print(report(result))


if __name__ == "__main__":
    main()
