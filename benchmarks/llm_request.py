"""Request analysis by the LLM against the local rules, on fixed subsets, blocks at 10%.

    semhist llm-server --port 8080 &      # or any OpenAI-compatible endpoint
    export OPENAI_BASE_URL=http://127.0.0.1:8080/v1 OPENAI_API_KEY=local SEMHIST_LLM_MODEL=qwen2.5-coder-1.5b-instruct-q4_k_m
    python benchmarks/llm_request.py [--sets locomo jmultiwoz time samples] [--budget 10%]

The same code as `semhist eval --keyword local|llm --sample N --json --details`. Subsets: 200
LoCoMo questions (categories 1-4, evenly spaced), 150 JMultiWOZ requests (evenly spaced), the
time-anchored requests built by `time_queries` from the JMultiWOZ threads (a day named
absolutely or relatively, with or without a topic, Japanese and English; the gold is every
message of that day, of that topic), and the two samples' queries. The model's replies are
kept in CACHE (keyed by the exact messages sent), so a rerun with the same prompt costs no
LLM time; delete it to ask the model again. Writes benchmarks/llm_request.md and .json.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from semhist.indexers.loader import load
from semhist.kernel.model import Query, Thread
from semhist.kernel.budget import Budget
from semhist.kernel.settings import Settings
from semhist import Engine
from semhist.evaluate import evaluate, sample_queries
from semhist.llm import make_llm

from common import LOCOMO_CATEGORIES, SAMPLES, RecordedLLM, add_data, add_out, data_file, save

TOPICS = {"hotel": ("ホテル", "the hotel"), "restaurant": ("レストラン", "the restaurant"),
          "shopping": ("買い物", "shopping"), "attraction": ("観光スポット", "sightseeing"),
          "weather": ("天気", "the weather"), "taxi": ("タクシー", "the taxi")}
NUMBERS_JA = {1: "一", 2: "二", 3: "三", 4: "四", 5: "五", 6: "六", 7: "七"}
NUMBERS_EN = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}


def domains(path: Path) -> dict[str, list[str | None]]:
    """Each thread's per-message JMultiWOZ domain (the dialogue's topic), from the raw file."""
    with path.open(encoding="utf-8") as f:
        return {t["id"]: [m.get("domain") for m in t["messages"]] for t in map(json.loads, f)}


def time_queries(threads: list[Thread], topics: dict[str, list[str | None]], per_thread: int = 4) -> list[Thread]:
    """Requests that name a day, with the messages of that day (of that topic) as the gold."""
    out = []
    for t_no, thread in enumerate(threads):
        domain = topics[thread.id]
        stamped = [m for m in thread.messages if m.timestamp]
        if not stamped:
            continue
        last = stamped[-1].timestamp.date()
        days = sorted({m.timestamp.date() for m in stamped})
        picked = [days[int(i * len(days) / per_thread)] for i in range(per_thread)] + days[-2:]
        queries = []
        for k, day in enumerate(dict.fromkeys(picked)):
            on_day = [(p, m) for p, m in enumerate(thread.messages) if m.timestamp and m.timestamp.date() == day]
            topic = Counter(domain[m.index] for _, m in on_day if domain[m.index] in TOPICS).most_common(1)
            form = (t_no + k) % 6
            ago = (last - day).days
            if ago in NUMBERS_JA and form in (2, 5):
                form = 6 if form == 2 else 7
            ja_day, en_day = f"{day.month}月{day.day}日", f"{day:%B} {day.day}"
            kind = "time_topic" if form in (0, 1, 2, 6) and topic else "time_day"
            if kind == "time_topic":
                ja, en = TOPICS[topic[0][0]]
                gold = tuple(m.index for _, m in on_day if domain[m.index] == topic[0][0])
                templates = {0: f"{ja_day}に{ja}について話した内容を教えて。",
                             1: f"What did we talk about regarding {en} on {en_day}?",
                             2: f"{ja_day}の{ja}の件、どうなったっけ？"}
                text = templates.get(form) or f"{NUMBERS_JA.get(ago)}日前に{ja}について何と言っていたか教えて。"
            else:
                gold = tuple(m.index for _, m in on_day)
                templates = {3: f"What did we discuss on {en_day}?", 4: f"Summarize our conversation from {en_day}.",
                             5: f"{ja_day}に話したことをまとめて。"}
                text = templates.get(form) or f"What did we talk about {NUMBERS_EN.get(ago)} days ago?"
                if form in (0, 1, 2):  # a topic form on a day without one
                    text = templates[5]
            queries.append(Query(text, gold, kind))
        out.append(replace(thread, queries=tuple(queries)))
    return out


def subsets(names: list[str]) -> dict[str, list[Thread]]:
    out = {}
    if "locomo" in names:
        threads = [replace(t, queries=tuple(q for q in t.queries if q.category in LOCOMO_CATEGORIES))
                   for t in load(data_file("locomo.jsonl")).threads]
        out["LoCoMo-200"] = sample_queries(threads, 200)
    jmultiwoz = load(data_file("jmultiwoz_threads.jsonl")).threads if {"jmultiwoz", "time"} & set(names) else []
    if "jmultiwoz" in names:
        out["JMultiWOZ-150"] = sample_queries(jmultiwoz, 150)
    if "time" in names:
        out["time-anchored"] = time_queries(jmultiwoz[:10], domains(data_file("jmultiwoz_threads.jsonl")))
    if "samples" in names:
        out["samples"] = [load(SAMPLES / n).threads[0] for n in ("english.json", "ramen.json")]
    return out


def run(names: list[str], budget: str, cache_dir: str | None) -> dict:
    settings = Settings.load(cache_dir=cache_dir)
    if settings.llm is None:
        raise SystemExit("no LLM configured: start `semhist llm-server` and export OPENAI_BASE_URL, "
                         "OPENAI_API_KEY and SEMHIST_LLM_MODEL (see the docstring)")
    llm = RecordedLLM(make_llm(replace(settings.llm, timeout=max(settings.llm.timeout, 300))),
                      Path(settings.cache_dir) / "llm_request_replies.jsonl")
    results = {"model": llm.model, "budget": budget, "sets": {}}
    for label, threads in subsets(names).items():
        row = {}
        for mode in ("local", "llm"):
            engine = Engine(replace(settings, keyword=mode), llm=llm if mode == "llm" else None)
            start, asked = time.perf_counter(), llm.asked
            try:
                # the samples are a few hundred tokens: `semhist ask`'s default budgets, not a share
                report = evaluate(engine, threads, ["blocks"], dataset=label, details=True,
                                  budget=None if label == "samples" else Budget.parse(budget))
            finally:
                engine.close()
            row[mode] = {"blocks": report["strategies"]["blocks"], "categories": report["categories"]["blocks"],
                         "queries": report["queries"], "wall_s": round(time.perf_counter() - start, 1),
                         "model_calls": llm.asked - asked}
        results["sets"][label] = row
    return results


def origins(queries: list[dict]) -> str:
    """How often each part of the analysis came from the LLM."""
    n = len(queries) or 1
    parts = Counter(f"{part}:{source}" for q in queries for part, source in (q["analysis"].get("from") or {}).items())
    shown = [f"{key} {count / n:.0%}" for key, count in sorted(parts.items()) if key.endswith(":llm")]
    return ", ".join(shown) or "none"


def markdown(results: dict) -> str:
    lines = ["# Request analysis: the LLM against the local rules", "",
             f"Generated by `python benchmarks/llm_request.py` with {results['model']} (the packaged model), "
             f"`blocks` at a {results['budget']} budget, USE-m3, default settings. Evidence recall / "
             "all-evidence rate; `from LLM` is the share of requests where that part of the analysis "
             "came from the model after validation.", "",
             "`unchecked` is the LLM's reply used as it came (semhist before its checks, the same replies; "
             "`--before benchmarks/llm_request_unchecked.json`).", "",
             "| set | n | local | LLM, checked | Δ recall | from LLM | LLM, unchecked |", "|---|---|---|---|---|---|---|"]
    before = results.get("before", {})
    for label, row in results["sets"].items():
        loc, llm = row["local"]["blocks"], row["llm"]["blocks"]
        old = before.get(label)
        lines.append(f"| {label} | {loc['n_queries']} | {loc['evidence_recall']} / {loc['all_evidence_rate']} | "
                     f"{llm['evidence_recall']} / {llm['all_evidence_rate']} | "
                     f"{llm['evidence_recall'] - loc['evidence_recall']:+.4f} | {origins(row['llm']['queries'])} | "
                     + (f"{old['evidence_recall']} / {old['all_evidence_rate']} |" if old else "- |"))
    lines += ["", "By category (evidence recall, local → LLM):", ""]
    for label, row in results["sets"].items():
        cats = [f"{c} {row['local']['categories'][c]['evidence_recall']} → {v['evidence_recall']} (n={v['n_queries']})"
                for c, v in row["llm"]["categories"].items()]
        lines.append(f"- {label}: " + "; ".join(cats))
    worse = [(label, q, row["local"]["queries"][i]) for label, row in results["sets"].items()
             for i, q in enumerate(row["llm"]["queries"])
             if q["evidence_recall"]["blocks"] < row["local"]["queries"][i]["evidence_recall"]["blocks"]]
    lines += ["", f"Requests where the LLM's analysis lost evidence: {len(worse)}", ""]
    for label, q, loc in worse[:15]:
        lines.append(f"- {label}: {q['query']!r}: {loc['evidence_recall']['blocks']} → {q['evidence_recall']['blocks']} "
                     f"(LLM keywords {q['analysis']['keywords']}, local {loc['analysis']['keywords']})")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="+", default=["locomo", "jmultiwoz", "time", "samples"])
    parser.add_argument("--budget", default="10%")
    parser.add_argument("--cache-dir")
    parser.add_argument("--before", help="a JSON {set: blocks figures} to show beside (an earlier run)")
    add_out(parser)
    add_data(parser)
    args = parser.parse_args()
    results = run(args.sets, args.budget, args.cache_dir)
    if args.before:
        results["before"] = json.loads(Path(args.before).read_text(encoding="utf-8"))
    save(results, args.out, "llm_request", markdown)


if __name__ == "__main__":
    main()
