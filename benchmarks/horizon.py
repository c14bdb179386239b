"""Memory over the long horizon: what a bot's fixed-size prompt keeps of a thread of 200k to 1M
tokens, at absolute budgets, beside the same requests asked of each conversation alone.

    python benchmarks/horizon.py                   # writes benchmarks/horizon.json and horizon.md
    python benchmarks/horizon.py --write-data DIR  # the long threads as JSON Lines (rebuilds the
                                                   # Japanese benchmark, docs/guides/horizon-ja.md)
    python benchmarks/horizon.py --sets jmultiwoz  # the Japanese set alone: runs in a bare clone,
                                                   # from data/benchmarks/ (LoCoMo is not shipped)

The threads (benchmarks/horizon_data.py): LoCoMo's ten conversations merged by their own dates
(5,882 messages); the JMultiWOZ threads joined (29,358, Japanese), where a request about a named
thing has every stretch of the whole thread about it as its gold; and both in one (35,240
messages, over 1M tokens). Each request is asked after the thread's last message, under
absolute budgets (tokens, the head layout: what a bot sends whatever its thread's length).

Metrics, per strategy and budget: evidence recall and all-evidence rate as `semhist eval`
counts them, except that a message counts as kept only when its whole text is in the prompt (a
tool result shown as its placeholder does not count); `named`: the share of a request's gold
stretches the prompt shows at least as a dated line (verbatim, or listed among the stretches
left out), in its own column; per category; the ask's time (warm: the thread's index in memory;
cold: a process's first ask of the stored thread). LoCoMo's questions are split by conversation:
`tune` (the first five) for choosing settings, `held` (the last five) for reporting, so a figure
says what a new thread will see.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from common import HOME_CACHE, add_data, add_out, data_file, out_file, pct, save, table
from horizon_data import jmultiwoz_joined, locomo_merged, mixed, stripped

BUDGETS = (1000, 2000, 4000, 8000)
STRATEGIES = ("blocks", "window", "token-budget", "utterances")
SETS = ("locomo", "jmultiwoz", "mixed", "single")
# Each dataset: its benchmark file, its long thread (and the name --write-data gives it), and how
# many of its first threads are `tune`; each set reads only the datasets it is made of, so the
# Japanese one runs where LoCoMo is not.
SOURCES = {"locomo": ("locomo.jsonl", locomo_merged, "locomo_merged", 5),
           "jmultiwoz": ("jmultiwoz_threads.jsonl", jmultiwoz_joined, "jmultiwoz_joined", 36)}
MADE_OF = {"locomo": ("locomo",), "jmultiwoz": ("jmultiwoz",), "mixed": ("locomo", "jmultiwoz"),
           "single": ("locomo", "jmultiwoz")}


def _thread(data: dict):
    from semhist import loads

    return loads(json.dumps(stripped(data), ensure_ascii=False)).only()


def _sample(queries: list[dict], n: int | None) -> list[int]:
    """Positions of `n` answerable queries, evenly spaced (the same ones on every run)."""
    ok = [i for i, q in enumerate(queries) if q.get("relevant_message_indices") and q.get("answerable", True)
          and q.get("category") != "locomo_cat5"]
    if not n or n >= len(ok):
        return ok
    return [ok[int(k * len(ok) / n)] for k in range(n)]


def _half(q: dict, tune: set[str]) -> str:
    origin = q.get("conversation") or q.get("thread") or ""
    return "tune" if origin in tune else "held"


def runs(positions: set[int]) -> list[set[int]]:
    """A request's gold as stretches: runs of consecutive messages (a JMultiWOZ topic segment
    about X; a LoCoMo evidence message)."""
    out: list[set[int]] = []
    for p in sorted(positions):
        if out and p - 1 in out[-1]:
            out[-1].add(p)
        else:
            out.append({p})
    return out


def score(engine, data: dict, name: str, strategies, budgets, n: int | None, tune: set[str]) -> dict:
    """Every sampled request of `data` under each strategy and budget."""
    from semhist import Budget

    thread = _thread(data)
    began = time.perf_counter()
    engine.put(thread)
    load_s = time.perf_counter() - began
    queries = [data["queries"][i] for i in _sample(data["queries"], n)]
    tallies: dict = defaultdict(lambda: defaultdict(list))
    ms: dict = defaultdict(list)
    for q in queries:
        keywords = engine.parts.asker.keywords(q["query"], thread.last_time)
        gold = set(q["relevant_message_indices"])
        stretches = runs(gold)
        for strategy in strategies:
            for budget in budgets:
                start = time.perf_counter()
                result = engine.ask(thread, q["query"], strategy=strategy, budget=Budget(float(budget), False),
                                    keywords=keywords if strategy in ("blocks", "utterances") else None)
                ms[(strategy, budget)].append((time.perf_counter() - start) * 1000)
                whole = {result.thread.messages[p].index for p in result.included
                         if p not in set(result.prompt.selection.cleared)}
                lined = {result.thread.messages[p].index for p in getattr(result.prompt.selection, "listed", ())}
                recall = len(gold & whole) / len(gold)
                seen = whole | lined
                shown = sum(1 for s in stretches if s & seen)
                alone = gold_alone(thread, result, gold, budget)
                for key in ("all", q.get("category") or "none", _half(q, tune), *([q["part"]] if "part" in q else [])):
                    t = tallies[(strategy, budget)]
                    t[key].append((recall, gold <= whole, shown / len(stretches), alone, result.prompt.tokens))
    out = {"messages": len(thread.messages), "queries": len(queries), "load_s": round(load_s, 1), "results": {}}
    for (strategy, budget), by in tallies.items():
        out["results"][f"{strategy}@{budget}"] = {
            key: {"recall": round(float(np.mean([r for r, *_ in v])), 3),
                  "all_evidence": round(float(np.mean([c for _, c, *_ in v])), 3),
                  "named": round(float(np.mean([s for _, _, s, _, _ in v])), 3),
                  "gold_alone": round(float(np.mean([g for *_, g, _ in v])), 3),
                  "tokens": round(float(np.mean([t for *_, t in v]))), "n": len(v)}
            for key, v in sorted(by.items())}
        out["results"][f"{strategy}@{budget}"]["ms"] = {"p50": pct(ms[(strategy, budget)], 50),
                                                         "p95": pct(ms[(strategy, budget)], 95)}
    out["tokens"] = int(sum(m.tokens for m in engine.store.messages(engine.put(thread))))
    out["bot"] = bot_path(engine, engine.put(thread), queries)
    return out


def gold_alone(thread, result, gold: set[int], budget: int) -> float:
    """The ceiling: the share of the gold that fits the room this prompt gave retrieved history
    (the budget less what is not retrieved: system prompt, request, recent turns), were the gold
    all it held, its shortest messages first (each as the prompt's line for it)."""
    from semhist.pipeline.select import line_cost

    shown = result.thread
    retrieved = sum(line_cost(shown, p, True) for r in result.prompt.selection.retrieved for p in r.message_ids)
    room = budget - (result.prompt.tokens - retrieved)
    kept = 0
    for cost in sorted(line_cost(thread, p, True) for p in gold):
        if cost > room:
            break
        room -= cost
        kept += 1
    return kept / len(gold)


def bot_path(engine, thread_id: str, queries: list[dict], n: int = 60) -> dict:
    """What a bot's ask of the stored thread costs (its id, not a file; 2,000 tokens, `blocks`):
    warm (the thread's state in memory), cold (a new process's first ask: a History with nothing
    in memory, over the same store), and the state's size in memory."""
    from semhist import Budget, History

    budget = Budget(2000.0, False)
    warm = []
    for q in queries[:n]:
        start = time.perf_counter()
        engine.ask(thread_id, q["query"], budget=budget, log_turn=False)
        warm.append((time.perf_counter() - start) * 1000)
    entry = engine.parts.states.peek(thread_id)
    cold = []
    for q in queries[:3]:
        fresh = History(engine.settings, llm=None)
        try:
            fresh.parts.asker.keywords("warm up")  # the process's own start, not the thread's
            start = time.perf_counter()
            fresh.ask(thread_id, q["query"], budget=budget, log_turn=False)
            cold.append((time.perf_counter() - start) * 1000)
        finally:
            fresh.close()
    return {"warm_p50": pct(warm, 50), "warm_p95": pct(warm, 95), "cold_ms": pct(cold, 50),
            "state_mb": round(entry.nbytes / 1e6, 1) if entry is not None else None, "asks": len(warm)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data(parser)
    parser.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, of {', '.join(SETS)}")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    parser.add_argument("--queries", type=int, default=300, help="requests per set, evenly spaced (0: all)")
    parser.add_argument("--limit", type=int, help="only the first N conversations/threads of each dataset")
    parser.add_argument("--cache-dir", type=Path, default=HOME_CACHE)
    parser.add_argument("--write-data", type=Path, metavar="DIR",
                        help="write the long threads of the chosen sets' datasets as JSON Lines and stop")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for this run (an ablation: --set list_stretches=off)")
    parser.add_argument("--name", default="horizon", help="the result files' name (default: horizon)")
    add_out(parser)
    args = parser.parse_args()
    _check_sets(parser, args.set)
    unknown = set(args.sets.split(",")) - set(SETS)
    if unknown:
        parser.error(f"--sets: unknown {', '.join(sorted(unknown))}; valid: {', '.join(SETS)}")
    sets = args.sets.split(",")
    # every file found (or the run stopped, saying which is missing) before any work
    paths = {d: data_file(SOURCES[d][0]) for d in SOURCES if any(d in MADE_OF[s] for s in sets)}
    built = _datasets(paths, args.limit)
    if args.write_data:
        for d, data in built.items():
            path = out_file(args.write_data, f"{SOURCES[d][2]}.jsonl")
            path.write_text(json.dumps(data, ensure_ascii=False) + "\n", encoding="utf-8")
            print(f"wrote {path}: {len(data['messages'])} messages, {len(data['queries'])} requests")
        return
    from semhist import Engine, Settings

    strategies = args.strategies.split(",")
    budgets = [int(b) for b in args.budgets.split(",")]
    tune = {t["id"] for d, path in paths.items() for t in _read_ids(path)[:SOURCES[d][3]]}
    shown = [f"--{k} {v}" for k, v in vars(args).items() if k in ("sets", "queries", "limit", "strategies", "budgets")
             and v and v != parser.get_default(k)] + [f"--set {kv}" for kv in args.set]
    results = {"command": " ".join(["python benchmarks/horizon.py", *shown]), "sets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in sets:
            chosen = dict(kv.split("=", 1) for kv in args.set)
            settings = Settings.load(env={f"SEMHIST_{k.upper()}": v for k, v in chosen.items()}, cache_dir=args.cache_dir,
                                     keyword="local", data_dir=Path(tmp) / name)
            engine = Engine(settings, store=None)
            try:
                if name == "single":
                    results["sets"]["single"] = _singles(engine, args, paths, strategies, budgets, tune)
                    continue
                # mixed changes the threads it is given: copies
                data = mixed(*(json.loads(json.dumps(built[d])) for d in MADE_OF[name])) if name == "mixed" \
                    else built[name]
                results["sets"][name] = score(engine, data, name, strategies, budgets, args.queries or None, tune)
                print(f"{name}: {results['sets'][name]['messages']} messages done", flush=True)
            finally:
                engine.close()
    results["settings"] = args.set
    save(results, args.out, args.name, render)


def _check_sets(parser: argparse.ArgumentParser, pairs: list[str]) -> None:
    """`--set NAME=VALUE`: a setting semhist has (an unknown name would be ignored silently)."""
    from semhist.kernel.settings import settings_fields

    known = {f.name for f in settings_fields()}
    for pair in pairs:
        name, sep, _ = pair.partition("=")
        if not sep or name not in known:
            parser.error(f"--set {pair!r}: expected NAME=VALUE with NAME one of {', '.join(sorted(known))}")


def _singles(engine, args, paths: dict[str, Path], strategies, budgets, tune) -> dict:
    """The same requests asked of each conversation (or JMultiWOZ thread) alone."""
    out = {}
    for label, path in paths.items():
        rows = _read_ids(path)[:args.limit] if args.limit else _read_ids(path)
        per = max(1, (args.queries or 0) // len(rows)) if args.queries else None
        parts = []
        for row in rows:
            row = {**row, "queries": [{**q, "conversation" if label == "locomo" else "thread": row["id"]}
                                      for q in row["queries"]]}
            parts.append(score(engine, row, label, strategies, budgets, per, tune))
        out[label] = _pooled(parts)
    return out


def _pooled(parts: list[dict]) -> dict:
    """Per-thread scores as one: means weighted by each thread's request count."""
    results: dict = {}
    for key in parts[0]["results"]:
        results[key] = {}
        for cat in {c for p in parts for c in p["results"][key] if c != "ms"}:
            cells = [p["results"][key][cat] for p in parts if cat in p["results"][key]]
            n = sum(c["n"] for c in cells)
            results[key][cat] = {m: round(sum(c[m] * c["n"] for c in cells) / n, 3) for m in
                                 ("recall", "all_evidence", "named", "gold_alone", "tokens")} | {"n": n}
        results[key]["ms"] = {"p50": round(float(np.median([p["results"][key]["ms"]["p50"] for p in parts])), 2),
                              "p95": round(float(np.median([p["results"][key]["ms"]["p95"] for p in parts])), 2)}
    return {"messages": sum(p["messages"] for p in parts), "queries": sum(p["queries"] for p in parts),
            "tokens": sum(p["tokens"] for p in parts), "results": results}


def _read_ids(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _datasets(paths: dict[str, Path], limit: int | None) -> dict[str, dict]:
    """Each dataset's long thread, of its first `limit` threads only where one is given."""
    if not limit:
        return {d: SOURCES[d][1](path) for d, path in paths.items()}
    out = {}
    with tempfile.TemporaryDirectory() as tmp:  # the first N of each, as files of their own
        for d, path in paths.items():
            part = Path(tmp) / path.name
            part.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in _read_ids(path)[:limit]),
                            encoding="utf-8")
            out[d] = SOURCES[d][1](part)
    return out


def render(results: dict) -> str:
    lines = ["# Memory over the long horizon: absolute budgets on threads of 200k to 1M tokens", "",
             f"Generated by `{results['command']}` (budgets in tokens, head layout, local keyword extractor). "
             "Recall / all-evidence / named: a message counts as kept only when its whole text is in the prompt; "
             "`named` is the share of a request's gold stretches the prompt shows at least as a dated line; `gold "
             "alone` the ceiling: the share of the gold that fits the room the prompt gave retrieved history, "
             "were the gold all it held (shortest messages first; given for `blocks`). "
             "`held`: LoCoMo's last five conversations and JMultiWOZ's last 35 threads, never used to choose "
             "settings.", ""]
    for name, s in results["sets"].items():
        parts = s.items() if name == "single" else [(name, s)]
        for label, body in parts:
            title = f"{label} alone (each conversation its own thread)" if name == "single" else label
            lines += [f"## {title}: {body['messages']:,} messages, {body['tokens']:,} tokens, {body['queries']} requests", ""]
            cats = sorted({c for r in body["results"].values() for c in r if c not in ("ms",)} - {"all"})
            rows = []
            for key, r in body["results"].items():
                a = r["all"]
                rows.append([key, f"{a['recall']:.3f} / {a['all_evidence']:.3f}", f"{a['named']:.3f}",
                             f"{a['gold_alone']:.3f}" if "gold_alone" in a and key.startswith("blocks@") else "-", a["tokens"],
                             *[f"{r[c]['recall']:.3f} / {r[c]['named']:.3f}" if c in r else "-" for c in cats],
                             f"{r['ms']['p50']} / {r['ms']['p95']}"])
            lines += table(["strategy@budget", "recall / all-evidence", "named", "gold alone", "tokens",
                            *[f"{c} (recall / named)" for c in cats], "ask ms p50 / p95"], rows) + [""]
            if body.get("bot"):
                b = body["bot"]
                lines += [f"A bot's ask of the stored thread (`blocks`, 2,000 tokens, {b['asks']} asks): warm p50 / p95 "
                          f"{b['warm_p50']} / {b['warm_p95']} ms; a new process's first ask {b['cold_ms']} ms; the "
                          f"thread's state in memory {b['state_mb']} MB.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
