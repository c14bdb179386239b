"""Answers, scored: what the packaged model says with each strategy's prompt.

    semhist llm-server --port 8080 &      # or any OpenAI-compatible endpoint
    export OPENAI_BASE_URL=http://127.0.0.1:8080/v1 OPENAI_API_KEY=local SEMHIST_LLM_MODEL=qwen2.5-coder-1.5b-instruct-q4_k_m
    python benchmarks/answers.py [--parts samples locomo jmultiwoz] [--locomo 12] [--jmultiwoz 8]
                                 [--thread locomo_conv-26 --thread jmultiwoz_thread_000]

samples: the two sample requests (`semhist ask data/samples/ramen.json "..." --answer`, default
budgets) under every strategy; the facts each answer names, from data/samples/answer_facts.json.
locomo / jmultiwoz: `semhist eval --answer` on an evenly spaced subset at a 10% budget (LoCoMo
categories 1-4: token F1 and the judge; JMultiWOZ: coverage of the evidence's names, numbers
and times). `full` is sent the whole thread (no budget), in a pass of its own before the
others: its prompts share the thread as their prefix, which llama.cpp reuses from one question
to the next, and a LoCoMo thread (10,000-20,000 tokens) needs `semhist llm-server --ctx-size
32768`. `--thread` keeps the questions of the named threads only, so that summary and
structured compact each thread once for all its questions. Compaction may catch up a whole
thread on the first ask (`compaction_calls` 1000), as on a bot that ran on it all along.
Replies are kept in the cache directory by exact prompt (a rerun costs no model time).
Writes benchmarks/answers.md and .json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from semhist.indexers.loader import load
from semhist.kernel.budget import Budget
from semhist.kernel.settings import Settings
from semhist import Engine
from semhist.evaluate import evaluate, sample_queries
from semhist.llm import make_llm
from semhist.scoring import make_judge

from common import LOCOMO_CATEGORIES, SAMPLES, RecordedLLM, add_data, add_out, data_file, facts_named, save

FACTS = SAMPLES / "answer_facts.json"
ALL = ["full", "window", "token-budget", "summary", "structured", "utterances", "blocks"]
EVAL_STRATEGIES = ALL


def samples(settings: Settings, llm, strategies: list[str]) -> dict:
    out = {}
    for file, spec in json.loads(FACTS.read_text(encoding="utf-8")).items():
        if file.startswith("_"):
            continue
        thread = load(SAMPLES / file).only()
        rows = {}
        for name in strategies:
            with tempfile.TemporaryDirectory() as tmp:  # a fresh store: compaction starts from nothing
                engine = Engine(replace(settings, data_dir=Path(tmp)), llm=llm)
                try:
                    result = engine.ask(thread, spec["request"], strategy=name, answer=True)
                finally:
                    engine.close()
            named = facts_named(result.answer or "", spec["facts"])
            rows[name] = {"facts": len(named), "of": len(spec["facts"]), "named": named,
                          "missing": [f for f in spec["facts"] if f not in named],
                          "prompt_tokens": result.prompt.tokens,
                          # an earlier row's prompt again: answered from the cache, no time to report
                          "answer_s": None if llm.cached else round((result.answer_ms or 0) / 1000, 1),
                          "llm_calls": result.llm_calls, "failed": list(result.llm_failures),
                          "answer": result.answer,
                          "summary": result.memory.summary.text if result.memory and result.memory.summary else None,
                          "statements": [f"{n.kind}: {n.text}" for n in result.memory.notes] if result.memory else []}
        out[file] = {"request": spec["request"], "strategies": rows}
    return out


def benchmark(settings: Settings, llm, judge, label: str, threads, strategies: list[str], budget: str) -> dict:
    """The budgeted strategies at `budget`; `full` alone and whole, first, then judged (its
    answers from the reply cache), so no other prompt evicts the thread's cached prefix."""
    reports = {}
    for names, limit in ((["full"] if "full" in strategies else [], None),
                         ([n for n in strategies if n != "full"], Budget.parse(budget))):
        if not names:
            continue
        engine = Engine(settings, llm=llm)
        start = time.perf_counter()
        try:
            if limit is None and judge is not None:  # answers first, judged below from the cache
                evaluate(engine, threads, names, budget=None, dataset=label, answer=True)
            reports[limit] = evaluate(engine, threads, names, budget=limit, dataset=label, details=True,
                                      answer=True, judge_llm=judge)
        finally:
            engine.close()
        reports[limit]["wall_s"] = round(time.perf_counter() - start, 1)
    first, *rest = reports.values()
    for other in rest:
        for key in ("strategies", "categories", "llm_failures"):
            first[key].update(other[key])
        first["wall_s"] += other["wall_s"]
    first["budget"] = budget
    return first


def run(args) -> dict:
    settings = Settings.load(cache_dir=args.cache_dir)
    if settings.llm is None:
        raise SystemExit("no LLM configured: start `semhist llm-server` and export OPENAI_BASE_URL, "
                         "OPENAI_API_KEY and SEMHIST_LLM_MODEL (see the docstring)")
    settings = replace(settings, llm_timeout=900, llm=replace(settings.llm, timeout=900), compaction_calls=1000)
    cache = Path(settings.cache_dir)
    llm = RecordedLLM(make_llm(settings.llm), cache / "answers_replies.jsonl")
    judge_client = make_judge(settings)
    judge = RecordedLLM(judge_client, cache / "answers_judge.jsonl") if judge_client else None
    results: dict = {"model": llm.model, "judge": judge.model if judge else None, "budget": args.budget}
    if "samples" in args.parts:
        results["samples"] = samples(settings, llm, ALL)  # a few answers each: every strategy
    strategies = args.strategies or EVAL_STRATEGIES
    if "locomo" in args.parts:
        threads = [replace(t, queries=tuple(q for q in t.queries if q.category in LOCOMO_CATEGORIES))
                   for t in load(data_file("locomo.jsonl")).threads]
        threads = [t for t in threads if not args.thread or t.id in args.thread]
        results["locomo"] = benchmark(settings, llm, judge, f"LoCoMo-{args.locomo}",
                                      sample_queries(threads, args.locomo), strategies, args.budget)
    if "jmultiwoz" in args.parts:
        threads = [t for t in load(data_file("jmultiwoz_threads.jsonl")).threads
                   if not args.thread or t.id in args.thread]
        results["jmultiwoz"] = benchmark(settings, llm, None, f"JMultiWOZ-{args.jmultiwoz}",
                                         sample_queries(threads, args.jmultiwoz), strategies, args.budget)
    return results


def markdown(results: dict) -> str:
    lines = ["# Answers, scored", "",
             f"Generated by `python benchmarks/answers.py` with {results['model']} (the packaged model) answering "
             f"and {results['judge'] or 'no'} judging, on this machine (2 busy cores). Replies come from the "
             "reply cache where an earlier run asked the same prompt: their times (answer s, answer_ms_p50) are "
             "then cache reads, not model time.", ""]
    for file, data in results.get("samples", {}).items():
        lines += [f"## {file}: {data['request']}", "", "Default budgets, as `semhist ask FILE REQUEST --answer`.", "",
                  "| strategy | facts named | missing | prompt tokens | answer s | LLM calls |", "|---|---|---|---|---|---|"]
        for name, r in data["strategies"].items():
            failed = f" (failed: {r['failed'][0][:60]})" if r["failed"] else ""
            lines.append(f"| {name} | {r['facts']}/{r['of']} | {', '.join(r['missing']) or '-'} | {r['prompt_tokens']} | "
                         f"{r['answer_s'] if r['answer_s'] is not None else 'from the reply cache'} | "
                         f"{r['llm_calls']}{failed} |")
        best = max(data["strategies"].items(), key=lambda kv: kv[1]["facts"])
        lines += ["", f"`{best[0]}`'s answer: {(best[1]['answer'] or '').strip()[:600]!r}", ""]
    cols = ["evidence_recall", "mean_prompt_tokens", "answer_f1", "judge_accuracy", "answer_coverage",
            "answer_ms_p50", "prompt_prefix_reuse", "llm_failures"]
    for key in ("locomo", "jmultiwoz"):
        if key not in results:
            continue
        report = results[key]
        lines += [f"## {report['dataset']} at {report['budget']} ({report['wall_s']} s)", "",
                  "| strategy | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
        for name, m in report["strategies"].items():
            label = f"{name} (whole thread)" if name == "full" else name
            lines.append(f"| {label} | " + " | ".join("-" if m.get(c) is None else str(m[c]) for c in cols) + " |")
        lines.append("")
        for name, cats in report["categories"].items():
            shown = [f"{c} F1 {v.get('answer_f1')} J {v.get('judge_accuracy')}" if v.get("answer_f1") is not None
                     else f"{c} coverage {v.get('answer_coverage')}" for c, v in cats.items()]
            lines.append(f"- {name}: " + "; ".join(shown))
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="+", default=["samples", "locomo", "jmultiwoz"])
    parser.add_argument("--strategies", nargs="+", help="for the locomo and jmultiwoz parts")
    parser.add_argument("--locomo", type=int, default=12, help="LoCoMo questions (evenly spaced)")
    parser.add_argument("--jmultiwoz", type=int, default=8, help="JMultiWOZ requests (evenly spaced)")
    parser.add_argument("--budget", default="10%")
    parser.add_argument("--thread", action="append", help="only this thread's questions (repeatable)")
    parser.add_argument("--cache-dir")
    add_out(parser)
    add_data(parser)
    args = parser.parse_args()
    results = run(args)
    save(results, args.out, "answers", markdown)


if __name__ == "__main__":
    main()
