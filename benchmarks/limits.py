"""Retrieval at the limit: `blocks` at tight budgets, by question category, without timestamps,
on time-anchored requests, and the segmenter against human topic boundaries.

    python benchmarks/limits.py                 # every part (common.data_file: where the sets are)
    python benchmarks/limits.py --parts budgets # one part: budgets, untimed, time, segmentation

Runs the same code as `semhist eval` (local keyword extractor, no LLM, default settings) and
writes benchmarks/limits.md and benchmarks/limits.json. Parts:

- budgets: evidence recall / all-evidence rate of `blocks` at 5%, 10% and 25% of each thread's
  history, LoCoMo and JMultiWOZ, with LoCoMo's multi-hop (cat1) and inference (cat3) rows, and
  beside them the gold alone in the same room (what a perfect search could reach).
- untimed: the same with every timestamp removed (imported histories, clients that drop
  them): blocks then rest on closings ("ありがとうございました"), size and topic alone.
- time: requests that name a day or an hour of the JMultiWOZ threads (benchmarks/time_requests.py),
  beside what the time alone gives (the gold messages, oldest first, in the same room).
- cjk: Chinese and Korean facts said once and asked back (data/probes/cjk.jsonl).
- segmentation: Pk / WindowDiff on TIAGE and JMultiWOZ (`semhist eval --segmentation`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from semhist.indexers.loader import load
from semhist.kernel.model import Thread
from semhist.kernel.budget import Budget
from semhist.kernel.settings import Settings
from semhist import Engine
from semhist.evaluate import evaluate

from common import (PROBES, add_data, add_out, add_subset, data_file, out_file, read_json, subset,
                    write_json)
from time_threads import time_threads

BUDGETS = ("5%", "10%", "25%")
CJK = PROBES / "cjk.jsonl"
PARTS = ("budgets", "untimed", "time", "cjk", "segmentation")
Read = Callable[[Path], list[Thread]]  # a dataset's threads (all of them, or the --limit/--queries part)


def untimed(thread: Thread) -> Thread:
    return replace(thread, messages=tuple(replace(m, timestamp=None) for m in thread.messages))


def recall_rows(engine: Engine, threads: list[Thread], dataset: str) -> dict:
    """{budget: {"all": {...}, category: {...}}} for `blocks`."""
    out = {}
    for budget in BUDGETS:
        report = evaluate(engine, threads, ["blocks"], budget=Budget.parse(budget), dataset=dataset)
        out[budget] = {"all": report["strategies"]["blocks"], **report["categories"]["blocks"]}
    return out


def part_budgets(engine: Engine, read: Read) -> dict:
    out = {}
    for name in ("locomo.jsonl", "jmultiwoz_threads.jsonl"):
        threads = read(data_file(name))
        out[name] = recall_rows(engine, threads, name)
        # the most a perfect search could put in the same room: how far a 5% target can be met
        out[f"{name}: the gold alone, shortest first"] = {b: {"all": gold_ceiling(engine, threads, b, "cheapest")}
                                                         for b in BUDGETS}
    return out


def part_untimed(engine: Engine, read: Read) -> dict:
    return {f"{name} without timestamps": recall_rows(engine, [untimed(t) for t in read(data_file(name))],
                                                     f"{name} untimed")
            for name in ("jmultiwoz_threads.jsonl", "locomo.jsonl")}


def part_time(engine: Engine, read: Read) -> dict:
    out = {}
    for variant, threads in time_threads(read(data_file("jmultiwoz_threads.jsonl"))).items():
        out[f"time requests, {variant}"] = recall_rows(engine, threads, f"time requests ({variant})")
        out[f"time requests, {variant}: the time alone"] = {b: {"all": gold_ceiling(engine, threads, b)}
                                                           for b in BUDGETS}
    return out


def gold_ceiling(engine: Engine, threads: list[Thread], budget: str, order: str = "oldest") -> dict:
    """What a perfect search could give in the same room: the gold messages packed into the
    room the prompt had for retrieved history (the recent turns kept count as found).

    `oldest`: oldest first, what the time alone gives a request that names it (a conversation
    from its start). `cheapest`: the shortest first, the most evidence messages the room can
    hold (a stretch header is paid once per run of adjacent messages).
    """
    from semhist.kernel.tokens import count_message
    from semhist.pipeline.select import RUN_OVERHEAD, line_cost

    recall, complete = [], []
    for thread in threads:
        for q in thread.queries:
            if not q.has_evidence:
                continue
            result = engine.ask(thread, q.text, budget=Budget.parse(budget))
            context = sum(count_message(m) for m in result.prompt.messages
                          if "<retrieved_history>" in str(m.get("content")))
            room = result.budget_tokens - (result.prompt.tokens - context)
            found = set(q.relevant) & set(result.prompt.selection.history_ids)
            wanted = sorted(set(q.relevant) - found)
            if order == "cheapest":
                wanted.sort(key=lambda p: line_cost(thread, p))
            spent = 0
            for p in wanted:
                joined = p - 1 in found or p + 1 in found
                price = line_cost(thread, p) + (0 if joined else RUN_OVERHEAD)
                if spent + price > room:
                    if order == "oldest":
                        break
                    continue
                spent += price
                found.add(p)
            recall.append(len(found & set(q.relevant)) / len(q.relevant))
            complete.append(set(q.relevant) <= found)
    return {"evidence_recall": round(sum(recall) / len(recall), 4),
            "all_evidence_rate": round(sum(complete) / len(complete), 4), "n_queries": len(recall)}


def part_cjk(engine: Engine, read: Read) -> dict:
    """Chinese and Korean facts asked back (data/probes/cjk.jsonl, benchmarks/make_probes.py)."""
    return {"cjk.jsonl (Chinese and Korean probes)": recall_rows(engine, read(CJK), "cjk.jsonl")}


SEGMENTERS = ("time-gap", "time+topic", "time+tiling")


def part_segmentation(engine: Engine, read: Read) -> dict:
    """Pk / WindowDiff of each segmenter's retrieval units (blocks and their topic sub-segments)
    and of its blocks alone, against the human topic boundaries, beside the baselines."""
    from semhist.segscore import evaluate_segmentation, gold_starts

    sets = {name: read(data_file(name)) for name in ("tiage.jsonl", "jmultiwoz_threads.jsonl")}
    sets["jmultiwoz_threads.jsonl without timestamps"] = [untimed(t) for t in sets["jmultiwoz_threads.jsonl"]]
    out: dict = {}
    for segmenter in SEGMENTERS:
        seg_engine = Engine(replace(engine.settings, segmenter=segmenter), llm=None)
        for name, threads in sets.items():
            report = evaluate_segmentation(seg_engine, threads, gold_starts(data_file(name.split()[0])),
                                           dataset=name)["segmentation"]
            row = out.setdefault(name, {"n_threads": report["n_threads"], "segmenters": {}, "baselines": {
                k: v for k, v in report["baselines"].items() if k != "blocks without sub-segments"}})
            row["segmenters"][segmenter] = {"pk": report["pk"], "window_diff": report["window_diff"],
                                            "blocks only": report["baselines"]["blocks without sub-segments"]}
    return out


def _cell(row: dict | None) -> str:
    return f"{row['evidence_recall']:.3f} / {row['all_evidence_rate']:.3f}" if row else "-"


def markdown(results: dict) -> str:
    lines = ["# Retrieval at the limit", "",
             "Generated by `python benchmarks/limits.py`: `blocks`, local keyword extractor (no LLM), "
             "USE-m3, default settings; a hard budget per query as a share of the thread's whole history. "
             "Cells are evidence recall / all-evidence rate.", ""]
    for part in ("budgets", "untimed", "time", "cjk"):
        for dataset, rows in results.get(part, {}).items():
            cats = sorted({c for r in rows.values() for c in r if c != "all"})
            lines += [f"## {dataset}", "", "| " + " | ".join(["budget", "all", *cats]) + " |",
                      "|---" * (len(cats) + 2) + "|"]
            for budget, r in rows.items():
                lines.append("| " + " | ".join([budget, _cell(r["all"]), *(_cell(r.get(c)) for c in cats)]) + " |")
            lines.append("")
    for dataset, seg in results.get("segmentation", {}).items():
        lines += [f"## Segmentation, {dataset} ({seg['n_threads']} threads)", "",
                  "| segmenter | Pk (blocks and sub-segments) | WindowDiff | Pk (blocks only) | WindowDiff |",
                  "|---|---|---|---|---|"]
        lines += [f"| `{name}` | {r['pk']:.3f} | {r['window_diff']:.3f} | {r['blocks only']['pk']:.3f} | "
                  f"{r['blocks only']['window_diff']:.3f} |" for name, r in seg["segmenters"].items()]
        lines += [f"| {name} | {b['pk']:.3f} | {b['window_diff']:.3f} | | |" for name, b in seg["baselines"].items()]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    add_subset(parser)
    add_out(parser)
    add_data(parser)
    parser.add_argument("--cache-dir", default=None, help="embedding cache (default: the settings' own)")
    args = parser.parse_args()
    engine = Engine(Settings.load(cache_dir=args.cache_dir), llm=None)
    out = out_file(args.out, "limits.json")
    results = read_json(out, {})  # a rerun part replaces its own

    def read(path: Path) -> list[Thread]:
        return subset(load(path).threads, args.limit, args.queries)

    for part in args.parts:
        start = time.perf_counter()
        results[part] = globals()[f"part_{part}"](engine, read)
        print(f"{part}: {time.perf_counter() - start:.0f} s", flush=True)
        write_json(out, results, end="\n")
        (args.out / "limits.md").write_text(markdown(results) + "\n", encoding="utf-8")
    print(markdown(results))


if __name__ == "__main__":
    main()
