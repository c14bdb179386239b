"""The bot's path, measured: a stored thread that grows while it is asked.

    python benchmarks/botloop.py --pg postgresql://USER@127.0.0.1:PORT/SCRATCH_DB   # writes benchmarks/botloop.md
    python benchmarks/botloop.py --sizes 0 --no-many --structured   # the real local LLM (OPENAI_BASE_URL etc. set)

The published table: --sizes 1000,5000,50000,1000000 --turns 1000 --long-turns 500 (about
1.5 hours on 2 cores, most of it the 1M-message ingests; PostgreSQL's took 22 minutes).

Each case runs in a fresh process. One thread is bulk-ingested (LoCoMo repeated; real USE-m3
vectors plus N(0, 0.02) noise, precomputed, as in benchmarks/scale.py), then a bot's turns
run on it: add the user's message, ask (the ask right after a write), ask again with another
request (an ask with no write before it), add the reply. Threads are shaped as Teams delivers
them (`--shape teams`, the default): every message carries its speaker's name and the bot's
writes an activity id as key; one exchange in 20 of the bulk and one turn in 4 of the loop
has the bot call a tool (a call and its result before the reply); one turn in 5 arrives in
two bursts a second apart; one turn in 37 comes after a 5-hour pause. `--shape plain` is the
older loop (no names, no keys, no tools). Every request is a LoCoMo question
made unique with the turn number, so no query embedding comes from a cache; the budget is
2,000 tokens; no LLM (local keyword). Resident memory is read after the first ask and after
the last turn. The many-threads case stores 1,000 threads of 100 messages and runs the same
turns on threads picked at random. The structured case asks `structured` on a 6,000-message
thread through 100 turns with the LLM configured in the environment and counts its calls.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

from common import (HOME_CACHE, ROOT, ReadyVectors, add_data, add_out, corpus, fresh_pg, out_file, pct, read_json,
                    rss_mb, table, teams_shape, teams_turn, write_json)

BUDGET = "2000"


def _history(url: str, workdir: Path, cache_dir: Path, **overrides):
    from semhist.kernel.settings import Settings
    from semhist import History

    # only the structured case reads the environment (the LLM it names); the rest use defaults
    settings = Settings.load(env=overrides.pop("env", {}), db=url, data_dir=workdir / "data", cache_dir=cache_dir, batch_size=1000,
                             keyword=overrides.pop("keyword", "local"), **overrides)
    return History(settings)


def _bulk(history, thread_id: str, messages, vectors) -> float:
    from semhist.kernel.model import Thread

    real = history.parts.ingestor.embedder
    history.parts.ingestor.embedder = ReadyVectors(vectors, real.dim, history.parts.embedder.id)
    start = time.perf_counter()
    history.ingest(thread_id, Thread(thread_id, tuple(messages)))
    history.parts.ingestor.embedder = real
    return time.perf_counter() - start


def _anon_mb() -> float:
    """Resident memory the process allocated itself (RSS without the SQLite file pages it maps)."""
    return rss_mb(field="RssAnon")


WARM = 1_000  # turns after which caches (SQLite pages, token counts, embeddings) are warm


SHAPE = "teams"  # set by --shape
VIEW_LIMIT: int | None = None  # set by --view-limit


def _turn_writes(turn: int, texts: list[str], when) -> tuple[list[list[dict]], list[dict]]:
    """The user's adds before the ask and the reply's add (common.teams_turn; `--shape plain`:
    one message each, no names, keys or tools)."""
    if SHAPE == "plain":
        user, reply = texts[(2 * turn) % len(texts)], texts[(2 * turn + 1) % len(texts)]
        return ([[{"role": "user", "content": f"{user} ({turn})", "timestamp": when.isoformat()}]],
                [{"role": "assistant", "content": f"{reply} ({turn})",
                  "timestamp": (when + timedelta(seconds=5)).isoformat()}])
    return teams_turn(turn, texts, when)


def _turns(history, threads: list[str], questions: list[str], texts: list[str], turns: int, last, seed: int = 0):
    """Run the bot loop; returns the timings (ms) of adds, asks after a write and asks without
    one, and the resident memory once the caches are warm."""
    from semhist.kernel.budget import Budget

    budget, rng = Budget.parse(BUDGET), random.Random(seed)
    adds, after, without, warm = [], [], [], None
    when = last
    for turn in range(turns):
        if turn == min(WARM, turns // 2):
            gc.collect()
            warm = (rss_mb(), _anon_mb())
        thread = threads[turn % len(threads)] if len(threads) == 1 else rng.choice(threads)
        when += timedelta(hours=5) if SHAPE == "teams" and turn % 37 == 36 else timedelta(seconds=30)
        users, reply = _turn_writes(turn, texts, when)
        for batch in users:
            t0 = time.perf_counter()
            history.add_many(thread, batch)
            t1 = time.perf_counter()
            adds.append((t1 - t0) * 1000)
        history.ask(thread, f"{questions[(2 * turn) % len(questions)]} ({turn})", budget=budget)
        t2 = time.perf_counter()
        history.ask(thread, f"{questions[(2 * turn + 1) % len(questions)]} ({turn}b)", budget=budget)
        t3 = time.perf_counter()
        history.add_many(thread, reply)
        t4 = time.perf_counter()
        adds.append((t4 - t3) * 1000)
        after.append((t2 - t1) * 1000)
        without.append((t3 - t2) * 1000)
    return adds, after, without, warm


def _summary(adds, after, without, warm, rss0, rss1) -> dict:
    """rss0/rss1/warm are (resident, anonymous) MB."""
    return {"add_ms_p50": pct(adds, 50), "add_ms_p95": pct(adds, 95),
            "ask_after_write_ms_p50": pct(after, 50), "ask_after_write_ms_p95": pct(after, 95),
            "ask_no_write_ms_p50": pct(without, 50), "ask_no_write_ms_p95": pct(without, 95),
            "after_vs_no_write_p50": round(float(np.median(after) / np.median(without)), 3),
            "rss_start_mb": round(rss0[0]), "rss_warm_mb": round(warm[0]), "rss_end_mb": round(rss1[0]),
            "rss_growth_mb": round(rss1[0] - rss0[0]), "rss_growth_after_warm_mb": round(rss1[0] - warm[0]),
            "anon_start_mb": round(rss0[1]), "anon_end_mb": round(rss1[1]), "anon_growth_mb": round(rss1[1] - rss0[1]),
            "anon_growth_after_warm_mb": round(rss1[1] - warm[1])}


def case_one(n: int, url: str, workdir: Path, cache_dir: Path, turns: int, asks_only: int = 2_000) -> dict:
    messages, vectors, questions = corpus(n, cache_dir)
    messages = teams_shape(messages) if SHAPE == "teams" else messages
    history = _history(url, workdir, cache_dir, **({"view_limit": VIEW_LIMIT} if VIEW_LIMIT else {}))
    history.store.migrate()
    ingest_s = _bulk(history, "bot", messages, vectors)
    last, texts = messages[-1].timestamp, [m.content for m in messages[:5000]]
    del messages, vectors
    gc.collect()
    embed_ms = []
    for q in questions[:20]:
        t = time.perf_counter()
        history.parts.embedder.inner.embed([q + " warm"], "query")
        embed_ms.append((time.perf_counter() - t) * 1000)
    history.ask("bot", questions[0])  # the first ask reads the thread (or its FAISS file) once
    vectors = history.parts.states.peek("bot").vectors
    if vectors is not None:
        vectors.wait()
    gc.collect()
    rss0 = (rss_mb(), _anon_mb())
    adds, after, without, warm = _turns(history, ["bot"], questions, texts, turns, last)
    gc.collect()
    rss1 = (rss_mb(), _anon_mb())
    asks_only = _asks_only(history, questions, turns, asks_only)
    out = {"case": "one thread", "shape": SHAPE, "messages": n, "backend": url.split(":")[0], "turns": turns,
           "ingest_s": round(ingest_s, 1), "embed_ms_p50": pct(embed_ms, 50),
           "view": _view(n, history.parts.states.peek("bot"), history.settings.view_limit),
           "view_limit": history.settings.view_limit,
           "full_loads": history.parts.states.loads, **_summary(adds, after, without, warm, rss0, rss1), **asks_only}
    history.close()
    return out


def _view(n: int, entry, limit: int) -> str:
    """What the loop's asks searched: the whole thread, candidate views, or first one then the other."""
    if n > limit:
        return "candidates"
    return "whole thread" if entry is not None and entry.index is not None else "whole, then candidates"


def _asks_only(history, questions: list[str], turns: int, n: int = 2_000) -> dict:
    """Asks with no write in between, after the loop (caches warm): what grows per request."""
    from semhist.kernel.budget import Budget

    budget = Budget.parse(BUDGET)
    gc.collect()
    before = _anon_mb()
    for i in range(n):
        history.ask("bot", f"{questions[i % len(questions)]} (after {turns + i})", budget=budget)
    gc.collect()
    return {"asks_only": n, "anon_growth_asks_only_mb": round(_anon_mb() - before, 1)}


def case_many(url: str, workdir: Path, cache_dir: Path, turns: int, threads: int = 1000, size: int = 100) -> dict:
    messages, vectors, questions = corpus(threads * size, cache_dir)
    messages = teams_shape(messages) if SHAPE == "teams" else messages
    history = _history(url, workdir, cache_dir)
    history.store.migrate()
    names = [f"19:bot-{i}@thread.v2" for i in range(threads)]
    start = time.perf_counter()
    for i, name in enumerate(names):
        _bulk(history, name, messages[i * size:(i + 1) * size], vectors[i * size:(i + 1) * size])
    ingest_s = time.perf_counter() - start
    last, texts = messages[-1].timestamp, [m.content for m in messages[:5000]]
    del messages, vectors
    gc.collect()
    history.ask(names[0], questions[0])
    rss0 = (rss_mb(), _anon_mb())
    adds, after, without, warm = _turns(history, names, questions, texts, turns, last, seed=1)
    gc.collect()
    s = history.settings
    out = {"case": f"{threads} threads x {size}", "shape": SHAPE, "messages": threads * size,
           "backend": url.split(":")[0],
           "turns": turns, "ingest_s": round(ingest_s, 1), "states_held": len(history.parts.states),
           "state_mb": round(history.parts.states.nbytes / 2**20, 1), "cache_limit": f"{s.cache_threads} threads / "
           f"{s.cache_mb} MB", "full_loads": history.parts.states.loads,
           **_summary(adds, after, without, warm, rss0, (rss_mb(), _anon_mb()))}
    history.close()
    return out


def case_structured(url: str, workdir: Path, cache_dir: Path, turns: int, lookback: int, n: int = 6000) -> dict:
    """`structured` with the real LLM: calls per turn, each user statement read once."""
    from semhist.kernel.budget import Budget
    from semhist.kernel.settings import Settings

    if Settings.load().llm is None:
        sys.exit("the structured case needs an LLM: run semhist llm-server and export what it prints")
    messages, vectors, questions = corpus(n, cache_dir)
    history = _history(url, workdir, cache_dir, env=dict(os.environ), keyword="auto", view_limit=5000, llm_timeout=300,
                       compaction_lookback=lookback)
    history.store.migrate()
    _bulk(history, "bot", messages, vectors)
    last, texts = messages[-1].timestamp, [m.content for m in messages if m.role == "user"][:turns]
    budget, per_turn = Budget.parse(BUDGET), []
    for turn in range(turns):
        when = last + timedelta(seconds=30 * (turn + 1))
        history.add("bot", "user", texts[turn], timestamp=when)
        t0 = time.perf_counter()
        result = history.ask("bot", questions[turn], strategy="structured", budget=budget)
        mem = result.memory
        per_turn.append({"turn": turn, "llm_calls": result.llm_calls, "extracted": mem.extracted,
                         "summaries": mem.summaries, "backlog": mem.backlog, "notes": len(mem.notes),
                         "ask_s": round(time.perf_counter() - t0, 2)})
        history.add("bot", "assistant", f"Noted ({turn}).", timestamp=when + timedelta(seconds=5))
        print(json.dumps(per_turn[-1]), file=sys.stderr, flush=True)
    notes = history.store.notes("bot", active_only=False)
    sources = [n.source_id for n in notes]
    history.close()
    from semhist.memory.compaction import only_questions

    calls = [t["llm_calls"] for t in per_turn]
    return {"case": "structured", "messages": n, "lookback": lookback, "backend": url.split(":")[0], "turns": turns,
            "llm_calls": sum(calls), "llm_calls_per_turn_p50": float(np.median(calls)), "llm_calls_per_turn_max": max(calls),
            "summary_calls": sum(t["summaries"] for t in per_turn),
            "extraction_calls": sum(t["extracted"] for t in per_turn),
            "statements_added": sum(1 for t in texts if not only_questions(t)),
            "turns_with_backlog": sum(1 for t in per_turn if t["backlog"]), "statements": len(notes),
            "statements_read_twice": len(sources) - len(set(sources)), "ask_s_p50": float(np.median(
                [t["ask_s"] for t in per_turn])), "per_turn": per_turn}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,5000,50000,1000000")
    p.add_argument("--turns", type=int, default=10_000)
    p.add_argument("--long-turns", type=int, help="turns for threads above 10,000 messages and for the "
                   "many-threads case (default: --turns); their ingest dominates otherwise")
    p.add_argument("--only", choices=["sqlite", "postgresql"], help="run one backend only")
    p.add_argument("--no-many", action="store_true", help="skip the many-threads case")
    p.add_argument("--pg", help="PostgreSQL URL of a scratch database (emptied per case)")
    p.add_argument("--structured", action="store_true", help="also the structured case with the configured LLM")
    p.add_argument("--structured-turns", type=int, default=100)
    p.add_argument("--lookback", type=int, default=200, help="compaction_lookback of the structured case")
    p.add_argument("--shape", choices=["teams", "plain"], default="teams",
                   help="teams: names, keys, tool calls, bursts, pauses (default); plain: the older loop")
    p.add_argument("--view-limit", type=int, help="view_limit of the one-thread cases (default: the "
                   "setting's); whole threads against candidate views at one size")
    p.add_argument("--asks-only", type=int, default=2_000, help="asks with no write in between after the loop "
                   "of the one-thread cases (anon_growth_asks_only_mb)")
    p.add_argument("--many-threads", type=int, default=1000, help="threads of the many-threads case")
    p.add_argument("--many-size", type=int, default=100, help="messages of each thread of the many-threads case")
    p.add_argument("--workdir", default="/tmp/semhist-botloop")
    p.add_argument("--cache-dir", default=str(HOME_CACHE))
    add_out(p)
    add_data(p)  # the LoCoMo the big threads repeat
    p.add_argument("--one", nargs=3, metavar=("CASE", "N", "URL"), help=argparse.SUPPRESS)
    args = p.parse_args()
    global SHAPE, VIEW_LIMIT
    SHAPE, VIEW_LIMIT = args.shape, args.view_limit
    work, cache = Path(args.workdir), Path(args.cache_dir)
    if args.one:
        kind, n, url = args.one
        result = (case_one(int(n), url, work, cache, args.turns, args.asks_only) if kind == "one" else
                  case_many(url, work, cache, args.turns, args.many_threads, args.many_size) if kind == "many" else
                  case_structured(url, work, cache, args.turns, args.lookback))
        print(json.dumps(result))
        return
    cases = [("one", n) for n in map(int, args.sizes.split(",")) if n] + ([] if args.no_many else [("many", 0)])
    cases += [("structured", 6000)] if args.structured else []
    backends = ["sqlite"] + (["postgresql"] if args.pg else [])
    backends = [b for b in backends if args.only in (None, b)]
    out = out_file(args.out, "botloop.json")
    rows = read_json(out, [])  # a rerun case replaces its row
    for kind, n in cases:
        for backend in [b for b in backends if b == "sqlite" or kind != "structured"]:
            case_dir = work / f"{kind}-{backend}-{n}"
            subprocess.run(["rm", "-rf", str(case_dir)], check=True)
            case_dir.mkdir(parents=True)
            url = f"sqlite:///{case_dir / 'store.sqlite3'}" if backend == "sqlite" else args.pg
            if backend == "postgresql":
                fresh_pg(url)
            turns = (args.structured_turns if kind == "structured" else args.turns if kind == "one" and n <= 10_000
                     else args.long_turns or args.turns)
            print(f"-- {kind} {backend} {n:,} messages, {turns} turns", file=sys.stderr, flush=True)
            done = subprocess.run([sys.executable, __file__, "--one", kind, str(n), url, "--turns", str(turns),
                                   "--lookback", str(args.lookback), "--shape", args.shape,
                                   *(["--view-limit", str(args.view_limit)] if args.view_limit else []),
                                   "--asks-only", str(args.asks_only), "--many-threads", str(args.many_threads),
                                   "--many-size", str(args.many_size),
                                   "--workdir", str(case_dir), "--cache-dir", args.cache_dir],
                                  stdout=subprocess.PIPE, text=True, cwd=ROOT)
            if done.returncode:
                sys.exit(f"case {kind} {backend} {n} failed")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows = [r for r in rows if _key(r) != _key(row)] + [row]
            rows.sort(key=lambda r: (r["case"] == "structured", "x" in r["case"], r["messages"], r["backend"] != "sqlite"))
            write_json(out, rows)
            (args.out / "botloop.md").write_text(report(rows, any(r["backend"] == "postgresql" for r in rows)),
                                                 encoding="utf-8")
            subprocess.run(["rm", "-rf", str(case_dir)], check=True)
    print(report(rows, any(r["backend"] == "postgresql" for r in rows)))


def _key(row: dict) -> tuple:
    """A rerun case replaces its row (rows without a view_limit ran with the old default, 5,000)."""
    return row["case"], row["backend"], row["messages"], row.get("shape", "plain"), row.get("view_limit", 5000)


def report(rows: list[dict], with_pg: bool) -> str:
    cols = ["case", "shape", "backend", "messages", "turns", "view_limit", "view", "add_ms_p50", "add_ms_p95", "ask_after_write_ms_p50",
            "ask_after_write_ms_p95", "ask_no_write_ms_p50", "ask_no_write_ms_p95", "after_vs_no_write_p50",
            "rss_start_mb", "rss_end_mb", "rss_growth_mb", "anon_growth_mb", "anon_growth_after_warm_mb",
            "anon_growth_asks_only_mb", "full_loads", "embed_ms_p50"]
    loop = [r for r in rows if r["case"] != "structured"]
    lines = ["# The bot's path (`python benchmarks/botloop.py`)", "",
             f"Machine: {os.cpu_count()} cores. " + " ".join((__doc__ or "").split("\n\n")[2:4]).replace("\n", " "), ""]
    if not with_pg:
        lines += ["PostgreSQL: skipped (no --pg URL given).", ""]
    lines += table(cols, [[r.get(c, "plain" if c == "shape" else "") for c in cols] for r in loop])
    many = [r for r in loop if "states_held" in r]
    lines += [f"\n{r['case']} ({r['backend']}): {r['states_held']} thread states held at the end, "
              f"{r['state_mb']} MB by their own estimate (limit {r['cache_limit']})." for r in many]
    for r in rows:
        if r["case"] == "structured":
            lines += ["", f"`structured` on {r['messages']:,} messages (compaction_lookback {r.get('lookback', 200)}), {r['turns']} turns "
                      f"with the LLM: {r['llm_calls']} LLM calls ({r['summary_calls']} summary chunks, "
                      f"{r['extraction_calls']} statement extractions), per turn p50 {r['llm_calls_per_turn_p50']:g}, "
                      f"max {r['llm_calls_per_turn_max']}; turns still catching up: {r['turns_with_backlog']}; "
                      f"statements added by the loop: {r['statements_added']}; statements read twice: "
                      f"{r['statements_read_twice']}; ask p50 {r['ask_s_p50']:.1f} s."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
