"""`semhist serve` under load: simulated bots over HTTP, each on its own thread.

    python benchmarks/service_load.py --db postgresql://USER@127.0.0.1:PORT/SCRATCH_DB --workers 2
    python benchmarks/service_load.py --workers 1              # SQLite in a scratch directory
    python benchmarks/service_load.py --db ... --saturate      # then raise the pace

Each case starts its own server (`semhist serve --workers N`) on 127.0.0.1. The store is
pre-filled once with --bots threads of a few hundred to a few thousand messages (LoCoMo
repeated, log-uniform sizes; real USE-m3 vectors plus noise, precomputed as in scale.py: the
ingest path runs for real, embedding time of the pre-fill is left out). Then every bot runs
the bot's turn at a human pace: append the user's message, ask for the context (budget
2,000 tokens, no LLM: local keyword), append the reply. Turns arrive as a Poisson process
(exponential gaps, mean --pace seconds per bot). Every request is unique (the turn number is
in the text), so no embedding comes from a cache. Eight context requests per bot come first,
so that every worker holds every thread (a worker reads a thread on its first ask of it). Resident memory of each worker is read after the
warm-up and at the end. The load generator runs on the same 2 cores as the server, so the
server gets less than the whole machine: the figures are conservative.

The first ask of each thread (the thread read from the store) is reported apart.

--saturate also runs at 1/4 and 1/2 the pace, then 2x, 4x, 8x until the context p95 passes
50 ms, and reports the throughput (turns/s) of each step.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from common import add_data, add_out, data_file, out_file, pct, read_json, write_json
from service_bots import ROUTES, Server, client_for, loads, prefill, run


async def warm_up(client, n: int, questions: list[str], rounds: int, first: list[float], one_at_a_time) -> None:
    """Context requests only, until (almost surely) every worker holds the thread: a worker
    loads a thread on its first ask of it, and which worker answers is the kernel's choice.
    The first ask of each thread runs alone, so its time is the read, not a queue."""
    for r in range(rounds):
        async with one_at_a_time if r == 0 and rounds > 1 else contextlib.nullcontext():
            began = time.perf_counter()
            await client.post(f"/v1/threads/bot-{n}/context", json={"request": f"{questions[r]} (warm {r})"})
            if r == 0:
                first.append((time.perf_counter() - began) * 1000)


async def warm(base: str, bots: int, questions, workers: int, rounds: int = 8) -> list[float]:
    """Until every worker has read every thread (the service counts the reads), at most 40 rounds."""
    first: list[float] = []
    async with client_for(base, bots) as client:
        alone = asyncio.Semaphore(1)
        await asyncio.gather(*(warm_up(client, i, questions, rounds, first, alone) for i in range(bots)))
        for r in range(32):
            if loads(urllib.request.urlopen(base + "/metrics").read().decode()) >= workers * bots:
                break
            await asyncio.gather(*(warm_up(client, i, questions[rounds + r:], 1, [], alone) for i in range(bots)))
    return first


async def sampled(server: Server, rss: list, work):
    """Run `work`, reading the workers' resident memory every 10 s."""
    task = asyncio.ensure_future(work)
    while not task.done():
        await asyncio.wait([task], timeout=10)
        rss.append(server.rss_mb())
    return task.result()


def summary(timings, errors, rate, pace) -> dict:
    row = {"pace_s": pace, "turns_per_s": round(rate, 2), "errors": len(errors), "error_sample": errors[:3]}
    for route in ROUTES:
        v = timings[route]
        row[route] = {"n": len(v), "p50": pct(v, 50, 1), "p95": pct(v, 95, 1), "p99": pct(v, 99, 1)}
    return row


def case(args, url: str, label: str, data_dir: Path, cache_dir: Path) -> dict:
    from semhist.indexers.loader import load

    sizes = prefill(url, data_dir, cache_dir, args.bots, args.min_messages, args.max_messages)
    threads = load(data_file("locomo.jsonl")).threads
    texts = [m.content for t in threads for m in t.messages if m.role != "system"][:5000]
    questions = [q.text for t in threads for q in t.queries if q.has_evidence]
    server = Server(url, data_dir, cache_dir, args.workers, data_dir / f"serve-{label}.log")
    try:
        first = asyncio.run(warm(server.base, args.bots, questions, args.workers))
        rss = [server.rss_mb()]
        row = summary(*asyncio.run(sampled(server, rss, run(server.base, args.bots, args.pace, args.duration, texts,
                                                            questions, seed=1))), args.pace)
        steps = []
        if args.saturate:  # slower and faster paces than the base run: where does context p95 pass 50 ms?
            for pace in (4 * args.pace, 2 * args.pace, args.pace / 2, args.pace / 4, args.pace / 8):
                step = summary(*asyncio.run(run(server.base, args.bots, pace, args.step_duration, texts, questions,
                                                seed=int(100 / pace))), pace)
                steps.append(step)
                print(f"  pace {pace:.3f} s: {step['turns_per_s']} turns/s, context p95 {step['context']['p95']} ms",
                      file=sys.stderr, flush=True)
                if pace < args.pace and (step["context"]["p95"] or 1e9) > 50:
                    break
    finally:
        server.stop()
    return {"case": label, "workers": args.workers, "bots": args.bots, "thread_sizes": [min(sizes), max(sizes)],
            "first_ask_ms": {"p50": pct(first, 50, 1), "p95": pct(first, 95, 1)},
            "messages_prefilled": sum(sizes), "duration_s": args.duration, **row,
            "rss_mb_start": rss[0], "rss_mb_end": rss[-1], "rss_mb_every_10s": rss, "saturation": sorted(
                steps + [row], key=lambda r: -r["pace_s"]) if steps else [], "cores": os.cpu_count()}


def report(rows: list[dict]) -> str:
    out = ["| case | workers | turns/s | errors | append p50/p95/p99 ms | context p50/p95/p99 ms | first ask of a "
           "thread p50 ms | RSS per worker start → end MB |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        a, c = r["append"], r["context"]
        rss = ", ".join(f"{s:.0f} → {e:.0f}" for s, e in zip(r["rss_mb_start"], r["rss_mb_end"]))
        out.append(f"| {r['case']} | {r['workers']} | {r['turns_per_s']} | {r['errors']} | {a['p50']} / {a['p95']} / "
                   f"{a['p99']} | {c['p50']} / {c['p95']} / {c['p99']} | {r['first_ask_ms']['p50']} | {rss} |")
    for r in rows:
        if r["saturation"]:
            out += ["", f"Saturation, {r['case']} ({r['workers']} workers): pace per bot → throughput, context p95", ""]
            out += ["| pace s | turns/s | append p50 / p95 ms | context p50 / p95 ms | errors |", "|---|---|---|---|---|"]
            for s in r["saturation"]:
                out.append(f"| {s['pace_s']:.3f} | {s['turns_per_s']} | {s['append']['p50']} / {s['append']['p95']} | "
                           f"{s['context']['p50']} / {s['context']['p95']} | {s['errors']} |")
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", help="postgresql://... (a scratch database); default: SQLite in --workdir")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--bots", type=int, default=100)
    p.add_argument("--min-messages", type=int, default=300)
    p.add_argument("--max-messages", type=int, default=3000)
    p.add_argument("--pace", type=float, default=5.0, help="mean seconds between a bot's turns")
    p.add_argument("--duration", type=float, default=120.0)
    p.add_argument("--saturate", action="store_true")
    p.add_argument("--step-duration", type=float, default=40.0)
    p.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "semhist-service-load"))
    add_out(p)
    add_data(p)
    args = p.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    url = args.db or f"sqlite:///{workdir / 'load.sqlite3'}"
    label = ("postgresql" if url.startswith("postgres") else "sqlite")
    from semhist.kernel.settings import Settings

    row = case(args, url, label, workdir, Settings.load().cache_dir)  # the LoCoMo vectors are cached there
    out = out_file(args.out, "service_load.json")
    rows = [r for r in read_json(out, []) if (r["case"], r["workers"]) != (label, args.workers)] + [row]
    write_json(out, rows)
    (args.out / "service_load.md").write_text(report(rows), encoding="utf-8")
    print(report(rows))


if __name__ == "__main__":
    main()
