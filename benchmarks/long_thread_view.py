"""What narrowing a long stored thread to a candidate view costs in retrieval quality.

    python benchmarks/long_thread_view.py      # writes benchmarks/long_thread_view.md

Every LoCoMo / JMultiWOZ question is asked through the store three ways:

- whole thread: its conversation stored as one thread, searched whole (as every thread up to
  SEMHIST_VIEW_LIMIT is);
- candidate view: the same thread, but searched through the view a long thread gets (the
  blocks of the 32 nearest messages in FAISS, the 16 blocks whose rarest matching terms score
  best in the store's full-text index, the messages of a named time, the last 40 messages, the
  open block), forced by a view limit of 1;
- one long thread: every conversation of the dataset stored as ONE thread (LoCoMo: 5,882
  messages, interleaved by their own dates; JMultiWOZ: 29,358, one thread after another),
  searched through its view as any thread above the view limit is. Here the view is a few
  percent of the thread, and the other conversations are distractors on the same topics.

Budget: 10% of the question's own conversation (absolute tokens), so every mode has the same
room. Metric: evidence recall and all-evidence rate, as in `semhist eval`, and the view size.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from common import HOME_CACHE, add_data, add_out, add_subset, data_file, out_file, subset


def _history(tmp: Path, cache_dir: Path, view_limit: int | None):
    from semhist.kernel.settings import Settings
    from semhist import History

    return History(Settings.load(env={}, db=f"sqlite:///{tmp / 'store.sqlite3'}", data_dir=tmp / "data",
                                 cache_dir=cache_dir, keyword="local", view_limit=view_limit))


def _ask_all(history, thread_of, threads, ids_of, unique: set[str] | None = None) -> dict:
    """Every answerable question; `thread_of(t)` names the stored thread, `ids_of[t.id][i]`
    the store id of message i of conversation t. With `unique`, recall is also given for
    those questions alone."""
    from semhist.kernel.budget import Budget
    from semhist.pipeline.assemble import fixed_cost

    recall, complete, sizes, only = [], [], [], []
    for thread in threads:
        own = fixed_cost(thread, "x", None) + _tokens(thread)
        budget = Budget(float(int(0.10 * own)), False)
        for q in thread.queries:
            if not q.has_evidence:
                continue
            result = history.ask(thread_of(thread), q.text, budget=budget, log_turn=False)
            kept = {result.thread.messages[p].index for p in result.included}
            wanted = {ids_of[thread.id][i] for i in q.relevant}
            recall.append(len(wanted & kept) / len(wanted))
            complete.append(wanted <= kept)
            sizes.append(len(result.thread.messages))
            if unique is not None and q.text in unique:
                only.append((recall[-1], complete[-1]))
    out = {"evidence_recall": round(float(np.mean(recall)), 3), "all_evidence": round(float(np.mean(complete)), 3),
           "mean_view_messages": round(float(np.mean(sizes))), "queries": len(recall)}
    if only:
        out["unique"] = (round(float(np.mean([r for r, _ in only])), 3), round(float(np.mean([c for _, c in only])), 3),
                         len(only))
    return out


def _unique_questions(threads) -> set[str]:
    """Questions with a keyword (a name, a place) that one conversation alone holds: in a thread
    joined from all of them, the others hold no equally good answer."""
    from semhist.pipeline.keyword import local_keywords

    texts = ["\n".join(m.content for m in t.messages) for t in threads]
    return {q.text for t in threads for q in t.queries
            if any(sum(k in text for text in texts) == 1 for k in local_keywords(q.text))}


def _tokens(thread) -> int:
    from semhist.kernel.tokens import count_message

    return sum(count_message(m.to_openai()) for m in thread.messages if m.role != "system")


def _shifts(threads, name: str) -> list:
    """How far each conversation moves in time in the joined thread. LoCoMo's conversations
    keep their own dates (its questions name them) and interleave by time; JMultiWOZ's 71
    threads all span the same two months at the same hours, so interleaving them would mix 71
    dialogues minute by minute: they follow one another instead (its questions name no date)."""
    from datetime import timedelta

    if "jmultiwoz" not in name:
        return [timedelta(0)] * len(threads)
    out, end = [], None
    for t in threads:
        start = t.messages[0].timestamp
        out.append(timedelta(0) if end is None else end - start + timedelta(days=1))
        end = t.messages[-1].timestamp + out[-1]
    return out


def run(dataset: Path, cache_dir: Path, limit: int | None, queries: int | None = None) -> dict:
    from semhist.indexers.loader import load
    from dataclasses import replace

    from semhist.kernel.model import Thread

    threads = subset(load(dataset).threads, limit, queries)
    out = {}
    for mode, view_limit in (("whole thread", 10**9), ("candidate view", 1)):
        with tempfile.TemporaryDirectory() as tmp:
            history = _history(Path(tmp), cache_dir, view_limit)
            ids_of = {}
            for thread in threads:
                history.ingest(thread.id, thread)
                ids_of[thread.id] = [m.id for m in history.store.messages(thread.id)]
                if view_limit < len(thread.messages):
                    history.vectors(thread.id).wait()  # the FAISS index is built in the background
            out[mode] = _ask_all(history, lambda t: t.id, threads, ids_of)
            history.close()
    with tempfile.TemporaryDirectory() as tmp:
        history = _history(Path(tmp), cache_dir, None)
        shift = _shifts(threads, dataset.name)
        order = sorted(((m.timestamp + shift[k], k, i) for k, t in enumerate(threads)
                        for i, m in enumerate(t.messages)))
        joined = Thread("joined", tuple(replace(threads[k].messages[i], index=n, timestamp=when)
                                        for n, (when, k, i) in enumerate(order)))
        history.ingest("joined", joined)
        stored = [m.id for m in history.store.messages("joined")]
        ids_of = {t.id: [0] * len(t.messages) for t in threads}
        for n, (_, k, i) in enumerate(order):
            ids_of[threads[k].id][i] = stored[n]
        history.vectors("joined").wait()
        out[f"one long thread ({len(joined.messages):,} messages)"] = _ask_all(history, lambda t: "joined", threads,
                                                                               ids_of, _unique_questions(threads))
        history.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache-dir", default=str(HOME_CACHE))
    add_subset(p)
    add_out(p)
    add_data(p)
    args = p.parse_args()
    lines = ["# Long-thread candidate view vs whole thread (`python benchmarks/long_thread_view.py`)", "",
             "10% budget of each question's own conversation (absolute tokens), local keyword, blocks strategy, "
             "SQLite store.", "",
             "| dataset | mode | evidence recall | all evidence | mean view (messages) | queries | "
             "questions with a keyword only their own conversation holds: recall / all evidence (n) |",
             "|---|---|---|---|---|---|---|"]
    for name in ("locomo.jsonl", "jmultiwoz_threads.jsonl"):
        for mode, r in run(data_file(name), Path(args.cache_dir), args.limit, args.queries).items():
            unique = "{} / {} ({})".format(*r["unique"]) if "unique" in r else "-"
            lines.append(f"| {name} | {mode} | {r['evidence_recall']} | {r['all_evidence']} | "
                         f"{r['mean_view_messages']} | {r['queries']} | {unique} |")
    text = "\n".join(lines) + "\n"
    out_file(args.out, "long_thread_view.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
