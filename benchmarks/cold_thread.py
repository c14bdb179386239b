"""What a replica pays for a thread it has never seen: the first ask, counted.

    python benchmarks/cold_thread.py [--pg postgresql://USER@127.0.0.1:PORT/SCRATCH_DB]   # writes cold_thread.md

A replica that never saw a thread (just started, or the thread was routed or evicted
elsewhere) has no state of it. For each size (100, 3,000 and 50,000 messages by default) one
Teams-shaped thread is stored (LoCoMo repeated, speakers' names, tool calls; real USE-m3
vectors plus N(0, 0.02) noise, as botloop.py does), then a fresh History with an empty data
folder (no FAISS files) asks it, after a first ask of another thread has loaded the models:

- `cold`: the first ask as it runs now (a thread past 2,000 messages: a candidate view without
  dense candidates, while the whole thread is read in the background; past `view_limit`: the
  same view while the FAISS index is built in the background);
- `whole first`: the first ask reading the thread whole before answering (the behaviour before,
  and what a file's first ask still does);
- `warm`: an ask once the state is in memory;
- `agreement`: of the messages the warm ask retrieved, the share the cold ask retrieved too
  (the same requests: what reading a view instead of the whole thread changes).

Counts are exact (message rows read from the store, read transactions); times are one run's
medians on a shared machine, given as ratios to the warm ask.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from common import HOME_CACHE, ReadyVectors, add_data, add_out, corpus, data_file, fresh_pg, save, table, teams_shape

QUESTIONS = 5  # requests asked per case (each on a fresh process state for the cold cases)
BUDGET = "2000"


class Work:
    """Message rows, vectors and read transactions of the store, counted from Python's call
    events in the asking thread (what the request waits for; the background read is timed,
    not counted). A vector is counted where it is decoded: read with its message or alone."""

    def __init__(self):
        import numpy as np

        from semhist.indexers.store import postgres, rows, sqlite

        self.kinds = {rows.message_row.__code__: "rows"}
        for store in (sqlite.SQLiteStore, postgres.PostgresStore):
            for name in ("_read", "_snapshot"):
                self.kinds[getattr(store, name).__wrapped__.__code__] = "reads"
        self.decode = np.frombuffer
        self.counts = {"rows": 0, "reads": 0, "vectors": 0}

    def _profile(self, frame, event, arg):
        if event == "call":
            kind = self.kinds.get(frame.f_code)
            if kind is not None:
                self.counts[kind] += 1
        elif event == "c_call" and arg is self.decode and frame.f_code.co_filename.endswith(
                ("store/reads.py", "store/rows.py")) and frame.f_code.co_name in ("<listcomp>", "message_row"):
            self.counts["vectors"] += 1

    def __enter__(self):
        self.counts = {"rows": 0, "reads": 0, "vectors": 0}
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)


def _store(url: str, n: int, data: Path, cache_dir: Path):
    from semhist import History
    from semhist.kernel.model import Thread
    from semhist.kernel.settings import Settings

    messages, vectors, questions = corpus(n, cache_dir)
    h = History(Settings.load(env={}, db=url, data_dir=data, cache_dir=cache_dir, batch_size=1000))
    real = h.parts.ingestor.embedder
    h.parts.ingestor.embedder = ReadyVectors(vectors, real.dim, h.parts.embedder.id)
    shift = datetime.now(timezone.utc) - timedelta(hours=1) - messages[-1].timestamp
    h.ingest("19:cold@thread.v2", Thread("cold", tuple(teams_shape([replace(m, timestamp=m.timestamp + shift)
                                                                    for m in messages]))))
    h.ingest("19:warmup@thread.v2", Thread("warmup", tuple(teams_shape(messages[:30]))))
    h.close()
    return questions


def _fresh(url: str, data: Path, cache_dir: Path, eager: bool = False):
    """A process that never saw the thread: empty data folder, models loaded on another thread."""
    from semhist import History
    from semhist.kernel.budget import Budget
    from semhist.kernel.settings import Settings

    h = History(Settings.load(env={}, db=url, data_dir=data, cache_dir=cache_dir))
    h.ask("19:warmup@thread.v2", "what did we plan?", budget=Budget.parse(BUDGET))
    if eager:  # the first ask reads the thread whole, as before and as a file's does
        h.parts.states.background = False
    return h


def _retrieved(result) -> set[int]:
    """Stored ids of the messages retrieved (a view's positions are not the whole thread's)."""
    return {result.thread.messages[p].index for r in result.prompt.selection.retrieved for p in r.message_ids}


def _ask(h, question: str) -> tuple[object, float, dict]:
    from semhist.kernel.budget import Budget

    with Work() as work:
        start = time.perf_counter()
        result = h.ask("19:cold@thread.v2", question, budget=Budget.parse(BUDGET))
        ms = (time.perf_counter() - start) * 1000
    return result, ms, dict(work.counts)


def case(url: str, n: int, cache_dir: Path, root: Path) -> dict:
    questions = _store(url, n, root / "stored", cache_dir)[:QUESTIONS]
    runs: dict[str, list] = {"cold": [], "whole_first": [], "warm": []}
    agreement, ready = [], []
    for k, q in enumerate(questions):
        h = _fresh(url, root / f"cold{k}", cache_dir)
        whole = n <= h.settings.view_limit  # a longer thread is never read whole
        first = _ask(h, q)
        began = time.perf_counter()
        h.parts.executor.submit(lambda: None).result()  # background work done (one worker, in order)
        ready.append((time.perf_counter() - began) * 1000 + first[1])
        again = _ask(h, q)
        runs["cold"].append(first)
        runs["warm"].append(again)
        got = _retrieved(again[0])
        agreement.append(len(_retrieved(first[0]) & got) / len(got) if got else 1.0)
        h.close()
        if whole:
            h = _fresh(url, root / f"whole{k}", cache_dir, eager=True)
            runs["whole_first"].append(_ask(h, q))
            h.close()
    out: dict = {"messages": n}
    for name, done in runs.items():
        out[name] = {"ms": round(statistics.median(r[1] for r in done), 1),
                     "rows": round(statistics.median(r[2]["rows"] for r in done)),
                     "reads": round(statistics.median(r[2]["reads"] for r in done)),
                     "vectors": round(statistics.median(r[2]["vectors"] for r in done))} if done else None
    out["agreement"] = round(statistics.mean(agreement), 3)
    out["background_ms"] = round(statistics.median(ready), 1)
    return out


def recall(url: str, cache_dir: Path, root: Path, per_thread: int) -> dict:
    """Evidence recall of first asks (each by a process state that never saw the thread) against
    asks of the thread read whole, on LoCoMo's conversations stored as Teams-shaped threads.
    They are shorter than the 2,000 messages past which a first ask reads a view: here every
    first ask does, so the view is what is scored."""
    from semhist import History
    from semhist.indexers.loader import load
    from semhist.kernel.budget import Budget
    from semhist.kernel.settings import Settings

    h = History(Settings.load(env={}, db=url, data_dir=root / "recall", cache_dir=cache_dir))
    found = {"cold": [], "whole": []}
    for thread in load(data_file("locomo.jsonl")).threads:
        tid = f"19:{thread.id}@thread.v2"
        h.ingest(tid, replace(thread, messages=tuple(teams_shape(list(thread.messages)))))
        ids = sorted(m.id for m in h.store.messages(tid))  # stored in the file's order
        queries = [q for q in thread.queries if q.has_evidence]
        step = max(1, len(queries) // per_thread)
        for q in queries[::step][:per_thread]:
            budget = Budget.parse(BUDGET)
            for mode in ("cold", "whole"):
                h.parts.states.discard(tid)
                h.parts.states.background = mode == "cold"
                h.parts.states.whole_at_once = 0  # every conversation's first ask through the view, to score it
                result = h.ask(tid, q.text, budget=budget, log_turn=False)
                h.parts.executor.submit(lambda: None).result()
                held = {result.thread.messages[p].index for p in result.prompt.selection.included}
                found[mode].append(sum(ids[i] in held for i in q.relevant) / len(q.relevant))
    h.close()
    return {mode: round(statistics.mean(v), 3) for mode, v in found.items()} | {"queries": len(found["cold"])}


def render(results: dict) -> str:
    rows = []
    for c in results["cases"]:
        warm = c["warm"]["ms"] or 1.0

        def work(run):
            return "-" if run is None else f"{run['rows']:,} / {run.get('vectors', 0):,} / {run['reads']}"

        def ms(run):
            return "- (never read whole)" if run is None else f"{run['ms']} ({run['ms'] / warm:.1f}x)"
        rows.append([results["backend"], f"{c['messages']:,}", work(c["cold"]), work(c["whole_first"]),
                     work(c["warm"]), ms(c["cold"]), ms(c["whole_first"]), c["warm"]["ms"], c["background_ms"],
                     c["agreement"]])
    return "\n".join([
        "# A thread a replica has never seen: the first ask", "",
        f"`{results['command']}` ({results['date']}). Medians of {QUESTIONS} requests, each asked by a fresh",
        "process state (no FAISS files); budget 2,000 tokens; no LLM. Work the request waits for, read from the",
        "store: message rows / vectors / read transactions. `background`: from the first ask until the whole state",
        "is in memory (a thread past `view_limit`: its FAISS index built). `agreement`: share of the warm ask's",
        "retrieved messages the cold ask retrieved too.", "",
        *table(["backend", "messages", "cold rows / vectors / reads", "whole-first", "warm",
                "cold ms", "whole-first ms", "warm ms", "background ms", "agreement"], rows), "",
        *([f"Evidence recall on LoCoMo's 10 conversations stored as Teams-shaped threads ({r['queries']} questions, "
           f"2,000-token budget), every first ask through the candidate view whatever the thread's length: "
           f"{r['cold']}; the thread read whole: {r['whole']}.", ""] if (r := results.get("recall")) else [])])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100,3000,50000")
    p.add_argument("--pg", help="PostgreSQL URL of a scratch database (emptied per case); default SQLite")
    p.add_argument("--recall", type=int, default=20, metavar="N",
                   help="also evidence recall of first asks on LoCoMo, N questions a conversation (0: skip)")
    p.add_argument("--cache-dir", default=str(HOME_CACHE))
    add_out(p)
    add_data(p)
    args = p.parse_args()
    cases = []
    for n in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="semhist-cold-") as tmp:
            if args.pg:
                fresh_pg(args.pg)
            url = args.pg or f"sqlite:///{Path(tmp) / 'semhist.sqlite3'}"
            cases.append(case(url, n, Path(args.cache_dir), Path(tmp)))
            print(f"  {n:,} messages: {cases[-1]}", file=sys.stderr, flush=True)
    extra = {}
    if args.recall:
        with tempfile.TemporaryDirectory(prefix="semhist-cold-") as tmp:
            if args.pg:
                fresh_pg(args.pg)
            url = args.pg or f"sqlite:///{Path(tmp) / 'semhist.sqlite3'}"
            extra["recall"] = recall(url, Path(args.cache_dir), Path(tmp), args.recall)
            print(f"  recall: {extra['recall']}", file=sys.stderr, flush=True)
    argv = ["postgresql://..." if a == args.pg else a for a in sys.argv[1:]]
    results = {"command": "python benchmarks/cold_thread.py " + " ".join(argv), "date": f"{datetime.now():%Y-%m-%d}",
               "backend": "PostgreSQL" if args.pg else "SQLite", "cases": cases, **extra}
    save(results, args.out, "cold_thread" + ("_pg" if args.pg else ""), render)


if __name__ == "__main__":
    main()
