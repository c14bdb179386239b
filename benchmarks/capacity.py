"""A capacity model from measurements: what a message costs on disk and in memory, what an ask
and an append cost in CPU and PostgreSQL statements, and a replay of 1,000,000 Teams-like
threads against those figures to size a deployment.

    python benchmarks/capacity.py measure --pg postgresql://USER@127.0.0.1:PORT/SCRATCH_DB   # writes capacity.json
    python benchmarks/capacity.py simulate                 # reads capacity.json, writes capacity.md
    python benchmarks/capacity.py all --pg ...             # both

`measure` runs the real embedder and store through `semhist.History`, on Teams-shaped threads
(LoCoMo text with its real vectors precomputed, speakers' names, activity ids as keys, tool
calls, turns typed in bursts, long pauses: common.teams_shape and common.teams_turn). Without
`--pg` it measures SQLite only and says so. The PostgreSQL database must have the
pg_stat_statements library preloaded (`-c shared_preload_libraries=pg_stat_statements`); the
script empties the database and creates the extension. `simulate` is capacity_model.py:
numpy, a fixed seed, a few minutes for the 1,000,000 threads.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

from capacity_pg import pg_cpu_s, pg_reset, pg_sql, pg_statements, pg_table_bytes, per_op, store_bytes
from common import HOME_CACHE, ReadyVectors, add_data, add_out, corpus, fresh_pg, out_file, read_json, rss_mb, \
    teams_shape, teams_turn, write_json

BUDGET = "2000"  # tokens, as botloop.py and the service benchmarks ask


# -- the store and its threads ------------------------------------------------------------------
def open_history(url: str, work: Path, cache_dir: Path, **overrides):
    from semhist import History
    from semhist.kernel.settings import Settings

    # defaults but for the store, the folders and the local keyword (no LLM in the measurement)
    return History(Settings.load(env={}, db=url, data_dir=work / "data", cache_dir=cache_dir, batch_size=1000,
                                 keyword="local", **overrides))


def as_posts(messages, thread_no: int) -> list[dict]:
    """Corpus messages as a bot posts them: OpenAI fields, the speaker's name and a Teams-like
    activity id (epoch milliseconds) as key, so the key index costs what it costs in production."""
    out = []
    for m in messages:
        d = {"role": m.role, "content": m.content, "timestamp": m.timestamp.isoformat(),
             "id": f"{int(m.timestamp.timestamp() * 1000)}{thread_no:03d}{m.index % 1000:03d}"}
        if m.name:
            d["name"] = m.name
        if m.tool_calls:
            d["tool_calls"] = [dict(c) for c in m.tool_calls]
        if m.tool_call_id:
            d["tool_call_id"] = m.tool_call_id
        out.append(d)
    return out


def fill(history, threads: dict[str, tuple[list, np.ndarray]], batch: int) -> None:
    """Append each thread's messages in batches, the threads taking turns (so their rows
    interleave on disk as live threads' do), with the precomputed vectors in place of the
    embedder (the embedding is timed apart, in the turns)."""
    real = history.parts.ingestor.embedder
    posts = {t: as_posts(msgs, i) for i, (t, (msgs, _)) in enumerate(threads.items())}
    longest = max(len(p) for p in posts.values())
    try:
        for lo in range(0, longest, batch):
            for t, (_, vectors) in threads.items():
                part = posts[t][lo:lo + batch]
                if part:
                    history.parts.ingestor.embedder = ReadyVectors(vectors[lo:lo + batch], real.dim,
                                                                   history.parts.embedder.id)
                    history.add_many(t, part)
    finally:
        history.parts.ingestor.embedder = real


def slices(messages, vectors, sizes: list[int], first: int = 0) -> list[tuple[list, np.ndarray]]:
    """Consecutive stretches of the corpus of the given sizes (each its own thread)."""
    out, lo = [], first
    for n in sizes:
        out.append((messages[lo:lo + n], vectors[lo:lo + n]))
        lo += n
    return out


# -- the measurements ----------------------------------------------------------------------------
def disk_bytes(url: str, work: Path, cache_dir: Path, data, threads: int, per_thread: int) -> dict:
    """Bytes per message at rest: the store after `threads` interleaved threads, then their FAISS
    files (written for threads above `view_limit`, lowered here below their length; flat up to
    `ann_threshold`, HNSW above it)."""
    messages, vectors = data[:2]
    parts = dict(zip([f"19:disk-{i}@thread.v2" for i in range(threads)],
                     slices(messages, vectors, [per_thread] * threads)))
    n = threads * per_thread
    history = open_history(url, work, cache_dir)
    history.store.migrate()
    before = pg_table_bytes(url) if url.startswith("postgres") else {}
    fill(history, parts, batch=10)  # a few turns' worth at a time
    history.close()
    out: dict = {"messages": n, "threads": threads}
    if url.startswith("postgres"):
        pg_sql(url, "CHECKPOINT")
        tables = {t: b - before.get(t, 0) for t, b in pg_table_bytes(url).items()}
        out["tables"] = {t: round(b / n) for t, b in sorted(tables.items(), key=lambda x: -x[1]) if b > 0}
        out["store_bytes_per_message"] = round(sum(tables.values()) / n)
    else:
        path = Path(url.removeprefix("sqlite:///"))
        out["store_bytes_per_message"] = round(sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / n)
    for kind, ann in (("flat", 10**9), ("hnsw", 1)):
        out[f"faiss_{kind}_bytes_per_message"] = faiss_bytes(url, work / f"faiss-{kind}", cache_dir, list(parts),
                                                             per_thread, ann) / n
    return out


def faiss_bytes(url: str, work: Path, cache_dir: Path, threads: list[str], per_thread: int, ann: int) -> float:
    history = open_history(url, work, cache_dir, view_limit=per_thread // 2, ann_threshold=ann)
    for t in threads:
        history.ask(t, "what did we decide?")
    history.close()  # writes the FAISS files of the threads it holds
    return float(sum(p.stat().st_size for p in Path(history.settings.index_dir).rglob("*.faiss")))


def thread_memory(history, thread_id: str, repeat: int) -> dict:
    """One thread's state: its own estimate (`Entry.nbytes`), the process's anonymous memory
    grown by its first load (later loads reuse what the allocator freed), and what a load costs
    over a warm ask (CPU and wall ms; a long thread's FAISS index is written at eviction as the
    cache does, and read back, or built, within the timed load)."""
    budget, cold, warm, grown = _budget(), [], [], []
    for i in range(repeat):
        evict(history, thread_id)
        gc.collect()
        anon = rss_mb(field="RssAnon")
        cold.append(_timed(lambda: _ready(history, thread_id, f"what was the budget? ({i})", budget)))
        gc.collect()
        grown.append(rss_mb(field="RssAnon") - anon)
        warm.append(_timed(lambda: history.ask(thread_id, f"who owns the ticket? ({i})", budget=budget)))
    entry = history.parts.states.peek(thread_id)
    cold_cpu, cold_wall = np.median([c[0] for c in cold]), np.median([c[1] for c in cold])
    warm_cpu, warm_wall = np.median([w[0] for w in warm]), np.median([w[1] for w in warm])
    return {"nbytes": entry.nbytes, "state": "whole" if entry.index is not None else "vectors",
            "anon_growth_first_load_mb": round(grown[0], 2),
            "cold_ask_cpu_ms": round(cold_cpu, 2), "cold_ask_wall_ms": round(cold_wall, 2),
            "warm_ask_cpu_ms": round(warm_cpu, 2), "warm_ask_wall_ms": round(warm_wall, 2),
            "load_cpu_ms": round(cold_cpu - warm_cpu, 2), "load_wall_ms": round(cold_wall - warm_wall, 2)}


def evict(history, thread_id: str) -> None:
    """What the cache does to a state past its limits: its FAISS file written, the state dropped."""
    entry = history.parts.states.discard(thread_id)
    if entry is not None and entry.vectors is not None:
        entry.vectors.save()


def _ready(history, thread_id: str, request: str, budget) -> None:
    """An ask, and the background work it started: a first ask may read a long thread whole in
    the background (answering from a view meanwhile), and a long thread's FAISS index is built
    or caught up there; the load's CPU is the same, so it is waited for within the timing."""
    history.ask(thread_id, request, budget=budget)
    entry = history.parts.states.peek(thread_id)
    if entry is None:
        return
    loading = getattr(entry, "loading", None)
    if loading is not None:
        loading.result()
    if entry.vectors is not None:
        entry.vectors.wait()


def _timed(call) -> tuple[float, float]:
    """(CPU ms of this process, wall ms) of one call."""
    c, w = time.process_time(), time.perf_counter()
    call()
    return (time.process_time() - c) * 1000, (time.perf_counter() - w) * 1000


def memory_by_length(url: str, work: Path, cache_dir: Path, data, lengths: list[int], repeat: int) -> dict:
    """Each length's thread whole (within the default view_limit), then through views."""
    messages, vectors, _, plain = data
    names = [f"19:len-{n}@thread.v2" for n in lengths]
    history = open_history(url, work, cache_dir)
    history.store.migrate()
    for name, part in zip(names, slices(messages, vectors, lengths)):
        fill(history, {name: part}, batch=500)
    history.ask(names[0], "warm up the tokenizer and the embedder")
    baseline = rss_mb()  # the embedder, tokenizer and store loaded, one small state held
    rows: dict = {str(n): {"whole": thread_memory(history, name, repeat)} for n, name in zip(lengths, names)
                  if n <= history.settings.view_limit}
    rows["rss_baseline_mb"] = round(baseline)
    # the service benchmarks' threads are LoCoMo without the Teams shape: their state, for the check
    fill(history, {"plain": (plain[:1000], vectors[:1000])}, batch=500)
    _ready(history, "plain", "what was the budget?", _budget())
    history.ask("plain", "and the deadline?")  # takes the state read in the background, if it was
    rows["plain_1000_nbytes"] = history.parts.states.peek("plain").nbytes
    rows["view_limit"] = history.settings.view_limit
    history.close()
    history = open_history(url, work, cache_dir, view_limit=min(lengths) // 2)
    history.ask(names[0], "warm up")
    for n, name in zip(lengths, names):
        rows.setdefault(str(n), {})["vectors"] = thread_memory(history, name, repeat)  # as if past view_limit
    history.close()
    return rows


def operations(url: str, work: Path, cache_dir: Path, data, length: int, turns: int, miss_ops: int) -> dict:
    """A bot's turns on a warm thread: CPU and wall per append and per ask (and PostgreSQL's
    CPU and statements per operation), then asks and appends that find the state evicted."""
    messages, vectors, questions = data[:3]
    thread = "19:ops@thread.v2"
    history = open_history(url, work, cache_dir)
    history.store.migrate()
    part = slices(messages, vectors, [length], first=len(messages) - length)[0]
    fill(history, {thread: part}, batch=500)
    texts = [m.content for m in messages[:5000] if m.content]
    history.ask(thread, questions[0])
    pg = url.startswith("postgres")
    when, turn_no = part[0][-1].timestamp, iter(range(10**9))

    def appends(miss: bool) -> tuple[list, list]:
        """One turn's writes (the user's one or two, the reply with its tool call)."""
        nonlocal when
        t = next(turn_no)
        when += timedelta(hours=5) if t % 37 == 36 else timedelta(seconds=30)
        users, reply = teams_turn(t, texts, when)
        timed = []
        for batch in [*users, reply]:
            if miss:
                evict(history, thread)
            timed.append(_timed(lambda: history.add_many(thread, batch)))
        return timed, []

    def ask(miss: bool) -> tuple[list, list]:
        t = next(turn_no)
        if miss:
            evict(history, thread)
        return [], [_timed(lambda: _ready(history, thread, f"{questions[t % len(questions)]} ({t})", _budget()))]

    out = {"thread_messages": length}
    for name, op, miss, n in (("appends_warm", appends, False, turns), ("asks_warm", ask, False, turns),
                               ("appends_after_miss", appends, True, miss_ops),
                               ("asks_after_miss", ask, True, miss_ops)):
        before = store_bytes(url)
        out[name] = _phase(url, pg, lambda: [op(miss) for _ in range(n)])
        out[name]["store_bytes_per_op"] = round((store_bytes(url) - before) / n, 1) if pg else None
        out[name]["thread_messages_after"] = history.store.marker(thread).messages
    history.close()
    return out


def _budget():
    from semhist.kernel.budget import Budget

    return Budget.parse(BUDGET)


def _phase(url: str, pg: bool, run) -> dict:
    """Run operations of one kind; per operation: CPU and wall ms, and with PostgreSQL the
    server's CPU and statements."""
    if pg:
        pg_reset(url)
        pg0 = pg_cpu_s(url)
    results = run()
    appends = [a for r in results for a in r[0]]
    asks = [a for r in results for a in r[1]]
    out = {"appends": len(appends), "asks": len(asks),
           **{f"{kind}_{what}_ms": round(float(np.median([x[i] for x in ops])), 2) if ops else None
              for kind, ops in (("append", appends), ("ask", asks)) for i, what in enumerate(("cpu", "wall"))}}
    if pg:
        counts, cpu = pg_statements(url), (pg_cpu_s(url) - pg0) * 1000
        ops = len(appends) + len(asks)
        out["pg_cpu_ms_per_op"] = round(cpu / ops, 2)
        out["pg_per_op"] = per_op(counts, ops)
    return out


# -- the run -------------------------------------------------------------------------------------
def measure(args) -> dict:
    lengths = [int(x) for x in args.lengths.split(",")]
    need = args.disk_threads * args.disk_messages + sum(lengths) + args.ops_length
    print(f"-- corpus: {need:,} Teams-shaped messages", file=sys.stderr, flush=True)
    messages, vectors, questions = corpus(need, Path(args.cache_dir))
    data = (teams_shape(messages), vectors, questions, messages)
    result = {"machine": {"cores": os.cpu_count()}, "budget": int(BUDGET), "backends": {},
              "pg_skipped": not args.pg, "args": {k: v for k, v in vars(args).items() if k not in ("pg", "out")}}
    for backend in ["sqlite"] + (["postgresql"] if args.pg else []):
        result["backends"][backend] = one_backend(backend, args, data, lengths)
    return result


def one_backend(backend: str, args, data, lengths: list[int]) -> dict:
    work = Path(args.workdir) / backend
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cache = Path(args.cache_dir)
    messages, vectors, questions, plain = data
    cut = args.disk_threads * args.disk_messages
    late = (messages[cut:], vectors[cut:], questions, plain[cut:])

    def url(name: str) -> str:
        if backend == "sqlite":
            return f"sqlite:///{work / name}.sqlite3"
        fresh_pg(args.pg)
        pg_sql(args.pg, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        return args.pg

    out = {}
    for part, call in (("disk", lambda: disk_bytes(url("disk"), work / "disk", cache, data, args.disk_threads,
                                                   args.disk_messages)),
                       ("memory", lambda: memory_by_length(url("memory"), work / "memory", cache, late, lengths,
                                                           args.repeat)),
                       ("operations", lambda: operations(url("ops"), work / "ops", cache, late, args.ops_length,
                                                         args.turns, args.miss_ops))):
        print(f"-- {backend}: {part}", file=sys.stderr, flush=True)
        began = time.perf_counter()
        out[part] = call()
        out[part]["took_s"] = round(time.perf_counter() - began, 1)
        print(json.dumps(out[part])[:600], file=sys.stderr, flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["measure", "simulate", "all"])
    p.add_argument("--pg", help="PostgreSQL URL of a scratch database with pg_stat_statements preloaded (emptied)")
    p.add_argument("--disk-threads", type=int, default=4, help="threads of the bytes-per-message store")
    p.add_argument("--disk-messages", type=int, default=1500, help="messages of each of them")
    p.add_argument("--lengths", default="100,1000,3000,10000", help="thread lengths whose state is measured")
    p.add_argument("--repeat", type=int, default=3, help="loads of each length (the median is kept)")
    p.add_argument("--ops-length", type=int, default=1000, help="messages of the thread the turns run on")
    p.add_argument("--turns", type=int, default=300, help="bot turns on the warm thread")
    p.add_argument("--miss-ops", type=int, default=40, help="turns whose appends, then asks, find the state evicted")
    p.add_argument("--threads", type=int, default=1_000_000, help="threads the simulation replays")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "semhist-capacity"))
    p.add_argument("--cache-dir", default=str(HOME_CACHE))
    add_out(p)
    add_data(p)  # the LoCoMo the threads repeat
    args = p.parse_args()
    path = out_file(args.out, "capacity.json")
    if args.mode in ("measure", "all"):
        measured = measure(args)
        write_json(path, {**read_json(path, {}), "measured": measured})
    if args.mode in ("simulate", "all"):
        from capacity_report import simulate_and_report

        results = read_json(path, {})
        if "measured" not in results:
            sys.exit(f"{path} holds no measurements: run `capacity.py measure` first")
        results["simulated"], text = simulate_and_report(results["measured"], args.threads, args.seed)
        write_json(path, results)
        (args.out / "capacity.md").write_text(text, encoding="utf-8")
        print(text)


if __name__ == "__main__":
    main()
