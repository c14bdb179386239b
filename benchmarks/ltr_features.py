"""Learning to rank, step 1: per-message features of every benchmark request (issue 52).

    python benchmarks/ltr_features.py --out /tmp/ltr                 # every set
    python benchmarks/ltr_features.py --out /tmp/ltr --sets jmultiwoz --queries 5

For each request of each thread, one row per message of the thread's index (or, on a thread
longer than --all-rows, per message of a candidate pool: the best --pool by fused, BM25 and
dense score each, and the neighbours of the best fused hits), with the features of
semhist.pipeline.features (NAMES) and the label "the message is gold evidence"
(`relevant_message_indices`). The threads are asked as `blocks` asks them: the local keyword
extractor's plan, the default embedder (USE-m3), the thread's own index.

`--file my.jsonl` writes your own labelled threads instead (the benchmark format of
docs/guides/evaluation.md; each thread's `split`, `tune` or `held`, says which file it goes to) as
the set `own`: `python benchmarks/ltr_train.py --train own --out DIR` then fits a model on them,
which the `ranker_model` setting reads.

Sets: `locomo` (each LoCoMo conversation alone), `locomo_merged` (the ten merged by their own
dates, benchmarks/horizon_data.py), `jmultiwoz` (each JMultiWOZ thread alone) and
`jmultiwoz_joined` (the 71 in one, a named thing's gold every stretch of it about the thing) and
`tiage` (TIAGE's chats as long threads of named people, benchmarks/tiage_questions.py). Each is split
as benchmarks/horizon.py splits it: `tune` is LoCoMo's first five conversations and JMultiWOZ's
first 36 threads, `held` the rest (a merged request is split by the conversation it came from;
TIAGE's by its own train/dev split).
LoCoMo's category 5 (adversarial, no evidence) is left out, as horizon.py leaves it out.

Writes DIR/SET_SPLIT.npz: X (rows x features, float32), y (gold), q (request number in the
file), tokens (each message's cost as a prompt line), the baselines' scores (rrf: today's fused
ranking; rrf_boost: with the author boost fact_candidates adds; bm25; cos); per request its gold
count (all of it, also what the pool left out), category, thread, language and text.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from common import HOME_CACHE, add_out, data_file
from horizon_data import jmultiwoz_joined, locomo_merged, stripped
from ltr_model import HAND_BONUS, SETS, check_sets

# A thread longer than this is asked through candidate views (the `view_limit` setting's
# default): here it is indexed whole, and each request records that today's ranking would
# treat it as long (term cover and mentions on: pipeline/mentions.py).
VIEW_LIMIT = 10_000
TUNE = {"locomo": 5, "jmultiwoz": 36}  # the first N threads of each file are `tune` (tiage: its `split`)
FILES = {"locomo": "locomo.jsonl", "jmultiwoz": "jmultiwoz_threads.jsonl", "tiage": "tiage_chats.jsonl"}


def _read(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _answerable(q: dict) -> bool:
    return bool(q.get("relevant_message_indices")) and q.get("answerable", True) and q.get("category") != "locomo_cat5"


def _evenly(items: list, n: int | None) -> list:
    """`n` of `items`, evenly spaced (the same ones on every run); all of them without `n`."""
    if not n or n >= len(items):
        return items
    return [items[int(k * len(items) / n)] for k in range(n)]


def _pool(rr, n: int, size: int, all_rows: int) -> np.ndarray:
    """The rows a request's features are written for: all of a thread up to `all_rows`, else
    the best `size` by each score and the neighbours of the best fused hits (what any ranking
    compared here would put within the largest budget comes from the first of these)."""
    if n <= all_rows:
        return np.arange(n)
    picked = [np.argsort(-s, kind="stable")[:size] for s in (rr.fused, rr.lexical, rr.dense)]
    best = np.argsort(-rr.fused, kind="stable")[:size // 4]
    near = (best[:, None] + np.arange(-2, 3)[None, :]).ravel()
    picked.append(near[(near >= 0) & (near < n)])
    return np.unique(np.concatenate(picked))


class Writer:
    """Rows of one split, gathered request by request."""

    def __init__(self) -> None:
        self.parts: dict[str, list] = defaultdict(list)
        self.meta: dict[str, list] = defaultdict(list)

    def add(self, rr, rows: np.ndarray, lines: np.ndarray, gold_rows: set[int], gold: int, info: dict) -> None:
        q = len(self.meta["gold"])
        self.parts["X"].append(rr.features[rows])
        self.parts["y"].append(np.isin(rows, list(gold_rows)).astype(np.int8))
        self.parts["q"].append(np.full(len(rows), q, dtype=np.int32))
        self.parts["tokens"].append(lines[rows].astype(np.int32))
        from semhist.pipeline.features import NAMES

        author = rr.features[:, NAMES.index("author_blk")]
        for name, scores in (("rrf", rr.fused), ("rrf_boost", rr.fused + HAND_BONUS * author), ("bm25", rr.lexical),
                             ("cos", rr.dense)):
            self.parts[name].append(scores[rows].astype(np.float32))
        self.meta["gold"].append(gold)
        for k, v in info.items():
            self.meta[k].append(v)

    def save(self, path: Path, names: tuple[str, ...]) -> None:
        arrays = {k: np.concatenate(v) for k, v in self.parts.items()}
        arrays.update({f"q_{k}": np.asarray(v) for k, v in self.meta.items()})
        np.savez_compressed(path, names=np.asarray(names), **arrays)


def requests(name: str, n: int | None, limit: int | None,
             own: Path | None = None) -> list[tuple[dict, list[tuple[dict, str]]]]:
    """(thread, [(request, split)]) of a set: each request asked of its own thread."""
    src = name.split("_")[0]
    rows = _read(own if src == "own" else data_file(FILES[src]))
    rows = rows[:limit] if limit else rows
    tune = {r["id"] for r in rows[:TUNE[src]]} if src in TUNE else \
        {r["id"] for r in rows if r.get("split", "tune") == "tune"}
    if name in ("locomo_merged", "jmultiwoz_joined"):
        with tempfile.TemporaryDirectory() as tmp:  # the first `limit` threads, in one
            part = Path(tmp) / FILES[src]
            part.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
            merged = (locomo_merged if src == "locomo" else jmultiwoz_joined)(part)
        qs = _evenly([q for q in merged["queries"] if _answerable(q)], n)
        return [(merged, [(q, "tune" if (q.get("conversation") or q.get("thread")) in tune else "held") for q in qs])]
    per = None if not n else max(1, n // len(rows))
    return [(r, [({**q, "thread": r["id"]}, "tune" if r["id"] in tune else "held")
                 for q in _evenly([q for q in r["queries"] if _answerable(q)], per)]) for r in rows]


def run(name: str, args: argparse.Namespace) -> dict:
    from semhist import Engine, Settings, loads
    from semhist.pipeline.features import NAMES, request_rows
    from semhist.pipeline.search import dense_rows
    from semhist.pipeline.select import line_cost

    writers = {"tune": Writer(), "held": Writer()}
    counts: dict = defaultdict(int)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        # every thread indexed whole (JMultiWOZ joined is 29,358 messages): features for all its rows
        settings = Settings.load(cache_dir=args.cache_dir, keyword="local", data_dir=Path(tmp), view_limit=100_000)
        engine = Engine(settings, store=None, llm=None)
        try:
            for data, asked in requests(name, args.queries or None, args.limit, args.file):
                thread = loads(json.dumps(stripped(data), ensure_ascii=False)).only()
                index = engine.index(thread)
                # a row's position is its message's place in the file (no system messages here)
                assert len(index.messages) == len(data["messages"]), data["id"]
                row_of = {p: r for r, p in enumerate(index.rows)}
                # each row's cost as a whole line of the prompt: what ltr_eval.py fills budgets with
                lines = np.array([line_cost(index.thread, p, True) for p in index.rows], dtype=np.int64)
                asker = engine.parts.asker
                for q, split in asked:
                    plan = asker.keywords(q["query"], thread.last_time)
                    dense = dense_rows(index, asker.query_vector(plan))
                    rr = request_rows(index, plan, dense, settings.gap_seconds)
                    gold = set(q["relevant_message_indices"])
                    rows = _pool(rr, len(index.rows), args.pool, args.all_rows)
                    writers[split].add(rr, rows, lines, {row_of[p] for p in gold if p in row_of}, len(gold),
                                       {"category": q.get("category") or "none",
                                        "thread": q.get("conversation") or q.get("thread") or data["id"],
                                        "language": data.get("language") or "", "query": q["query"],
                                        "intent": plan.intent, "timed": plan.time_range is not None,
                                        "long": len(index.rows) > VIEW_LIMIT})
                    counts[split] += 1
                print(f"{name}: {data['id']} done ({sum(counts.values())} requests, "
                      f"{time.perf_counter() - began:.0f} s)", file=sys.stderr, flush=True)
        finally:
            engine.close()
    for split, w in writers.items():
        if w.meta["gold"]:
            w.save(args.out / f"{name}_{split}.npz", NAMES)
    return {"requests": dict(counts), "seconds": round(time.perf_counter() - began, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out(parser, Path("/tmp/ltr"))  # large files of rows: a scratch folder, not the published results
    parser.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, of {', '.join(SETS)}")
    parser.add_argument("--queries", type=int, default=0,
                        help="requests per set, evenly spaced over its threads (0: all)")
    parser.add_argument("--limit", type=int, help="only the first N threads of each file")
    parser.add_argument("--pool", type=int, default=400, help="per score, the best rows of a long thread kept")
    parser.add_argument("--all-rows", type=int, default=1500, help="a thread up to this many rows keeps all")
    parser.add_argument("--cache-dir", type=Path, default=HOME_CACHE)
    parser.add_argument("--file", type=Path, help="your own labelled threads (the benchmark format, each "
                        "thread's `split` tune or held; tune without): written as the set `own`")
    args = parser.parse_args()
    sets = ["own"] if args.file else check_sets(parser, "--sets", args.sets)
    if args.file and not args.file.is_file():
        parser.error(f"--file: {args.file} is not a file")
    args.out.mkdir(parents=True, exist_ok=True)
    done = args.out / "features.json"  # sets written by earlier runs into the same folder stay listed
    report = json.loads(done.read_text(encoding="utf-8")) if done.exists() else {}
    report.update({name: run(name, args) for name in sets})
    done.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
