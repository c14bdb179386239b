"""What narrowing a long stored thread to a candidate view costs in retrieval quality.

    python benchmarks/long_thread_view.py      # writes benchmarks/long_thread_view.md

Every LoCoMo / JMultiWOZ thread is stored, then each question is asked twice through the store:
with the whole thread searched (as for threads up to SEMHIST_VIEW_LIMIT) and with the view a
long thread gets (the blocks of the 32 nearest messages, the last 40 messages, the open block),
forced by a view limit of 1. Budget: 10% of the thread's full-history tokens, as absolute tokens,
so both modes have the same room. Metric: evidence recall and all-evidence rate, as in
`semhist eval`, plus the mean view size.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def run(dataset: Path, cache_dir: Path, limit: int | None) -> dict:
    from indexers.loader import load
    from indexers.settings import Budget, Settings
    from retrieval import History
    from retrieval.pipeline.assemble import fixed_cost

    threads = load(dataset).threads[:limit] if limit else load(dataset).threads
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{Path(tmp) / 'store.sqlite3'}"
        for mode, view_limit in (("whole thread", 10**9), ("candidate view", 1)):
            settings = Settings.load(env={}, db=db, data_dir=Path(tmp) / "data", cache_dir=cache_dir,
                                     view_limit=view_limit, keyword="local")
            history = History(settings)
            recall, complete, sizes = [], [], []
            for thread in threads:
                history.ingest(thread.id, thread)
                ids = [m.id for m in history.store.messages(thread.id)]
                full = fixed_cost(thread, "x", None) + history.store.marker(thread.id).tokens
                budget = Budget(float(int(0.10 * full)), False)
                for q in thread.queries:
                    if not q.has_evidence:
                        continue
                    result = history.ask(thread.id, q.text, budget=budget, log_turn=False)
                    view = result.thread
                    kept = {view.messages[p].index for p in result.included}
                    wanted = {ids[i] for i in q.relevant}
                    recall.append(len(wanted & kept) / len(wanted))
                    complete.append(wanted <= kept)
                    sizes.append(len(view.messages))
            history.close()
            out[mode] = {"evidence_recall": round(float(np.mean(recall)), 3),
                         "all_evidence": round(float(np.mean(complete)), 3),
                         "mean_view_messages": round(float(np.mean(sizes))), "queries": len(recall)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "semhist"))
    p.add_argument("--limit", type=int, help="first N threads of each dataset")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "long_thread_view.md"))
    args = p.parse_args()
    lines = ["# Long-thread candidate view vs whole thread (`python benchmarks/long_thread_view.py`)", "",
             "10% budget (absolute tokens), local keyword, blocks strategy, SQLite store.", "",
             "| dataset | mode | evidence recall | all evidence | mean view (messages) | queries |",
             "|---|---|---|---|---|---|"]
    for name in ("locomo.jsonl", "jmultiwoz_threads.jsonl"):
        for mode, r in run(DATA / name, Path(args.cache_dir), args.limit).items():
            lines.append(f"| {name} | {mode} | {r['evidence_recall']} | {r['all_evidence']} | "
                         f"{r['mean_view_messages']} | {r['queries']} |")
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
