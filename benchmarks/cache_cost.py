"""What a bot pays per turn when the provider caches prompt prefixes, per strategy and layout.

    python benchmarks/cache_cost.py                      # writes benchmarks/cache_cost.md
    python benchmarks/cache_cost.py --sets locomo --conversations 1 --turns 10 --out /tmp/cc

The bot loop on a stored thread: the thread's first messages are stored, then for each of its
last `--turns` user turns: add the user's message, ask (the request is that message, the
budget of its variant, local keyword, a system prompt set), add the replies that follow. Threads
are Teams-shaped (a speaker's name on every user message, an activity id as each message's
key, one exchange in 20 a tool call and its result). Every strategy is asked on every turn in
each variant, `layout:budget` (`--variants`; 1000b is a budget of 1,000 billed tokens), each on a
store of its own: the cache layout reads what the previous asks of the strategy logged.

Billing, in uncached-token equivalents: cached = the prefix a prompt shares with the previous
turn's prompt (semhist.billing.cached_tokens, cl100k tokens); "openai" bills cached tokens at
0.1x from 1,024 tokens in 128-token steps, "anthropic" at 0.1x with the rest written at 1.25x.
Whether the cache is still warm is decided by the thread's own timestamps: "warm" assumes it
always is, 5m / 30m / 1h by the time since the previous turn (a cold turn caches nothing).

Recall: on each turn one of the benchmark's questions whose evidence is already stored is
asked beside the loop (not stored); evidence recall = the share of its evidence messages the
prompt holds (retrieved or among the recent turns).

Sets: `locomo` (each conversation), `jmultiwoz` (the first threads of the joined dialogues),
`joined` (all ten LoCoMo conversations one after another, each shifted by days: its dated
requests point at the wrong days; kept for the figures of earlier rounds). The long threads of
benchmarks/horizon.py, by their messages' own dates: `merged` (LoCoMo, 5,882 messages, ~199k
tokens) and `japanese` (the JMultiWOZ threads joined, 29,358 messages, ~986k tokens; a named
thing's gold is every stretch about it). Their figures go to their own file:

    python benchmarks/cache_cost.py --sets merged,japanese --strategies full,blocks \
        --variants head:2000,cache:1000b,cache:2000b --name cache_cost_long

`summary` and `structured` need an LLM: `--llm` reads the one the environment names
(`semhist llm-server` prints what to export) and writes cache_cost_memory.md; on 2 cores the
packaged model takes about half a minute a compaction, so run it on a subset:

    python benchmarks/cache_cost.py --llm --sets locomo --conversations 1 --turns 20 \
        --strategies full,token-budget,summary,structured --variants cache:2000
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from common import add_data, add_out, data_file, save, table, teams_shape

STRATEGIES = ("full", "window", "token-budget", "utterances", "blocks")
SETS = ("locomo", "jmultiwoz", "joined", "merged", "japanese")
VARIANTS = ("head:2000", "head:1000", "cache:2000", "cache:1000b", "cache:1500b", "cache:2000b")  # layout:budget
LIFETIMES = {"warm": None, "5m": 300, "30m": 1800, "1h": 3600}
COMPACTION_LOOKBACK = 60  # --llm: what the first compaction reads of a stored thread (the model is slow here)
SYSTEM = ("You are the team's assistant in this Teams chat. Answer from the conversation: the quoted "
          "earlier messages and the recent turns. Be brief and exact; say so when the conversation does not say.")


def _threads(sets: list[str], conversations: int):
    from semhist import load
    from semhist.kernel.model import Thread

    out = []
    locomo = list(load(data_file("locomo.jsonl")).threads) if {"locomo", "joined"} & set(sets) else []
    if "locomo" in sets:
        out += [("locomo", t) for t in locomo[:conversations]]
    if "jmultiwoz" in sets:
        out += [("jmultiwoz", t) for t in list(load(data_file("jmultiwoz_threads.jsonl")).threads)[:conversations]]
    if "joined" in sets:
        messages, queries = [], []
        for t in locomo:
            days = (messages[-1].timestamp.date() - t.messages[0].timestamp.date()).days + 1 if messages else 0
            offset = len(messages)
            messages += [replace(m, index=offset + m.index, timestamp=m.timestamp + timedelta(days=days))
                         for m in t.messages]
            queries += [replace(q, relevant=tuple(offset + r for r in q.relevant)) for q in t.queries]
        out.append(("joined", Thread("locomo_joined", tuple(messages), tuple(queries))))
    out += [(name, _long(name)) for name in ("merged", "japanese") if name in sets]
    return [(name, replace(t, messages=tuple(teams_shape(list(t.messages))))) for name, t in out]


def _long(name: str):
    """A long thread of benchmarks/horizon.py by its own dates, its annotations left out."""
    import json

    from horizon_data import jmultiwoz_joined, locomo_merged, stripped
    from semhist import loads

    data = locomo_merged(data_file("locomo.jsonl")) if name == "merged" \
        else jmultiwoz_joined(data_file("jmultiwoz_threads.jsonl"))
    return loads(json.dumps(stripped(data), ensure_ascii=False)).only()


def _raw(m, position: int) -> dict:
    raw = {"role": m.role, "content": m.content, "name": m.name, "id": f"1:{position}",
           "timestamp": m.timestamp.isoformat() if m.timestamp else None}
    if m.tool_calls:
        raw["tool_calls"] = list(m.tool_calls)
    if m.tool_call_id:
        raw["tool_call_id"] = m.tool_call_id
    return {k: v for k, v in raw.items() if v is not None}


def run_thread(thread, turns: int, strategies, layouts, workdir: Path, llm: bool = False) -> dict:
    """`layouts`: the variants, each "layout:budget"; each gets a store of its own. `llm`: the
    LLM the environment names summarizes (summary, structured); else there is none."""
    from semhist import Budget, History, Settings
    from semhist.billing import cached_tokens, prompt_tokens

    messages = thread.messages
    starts = [p for p, m in enumerate(messages) if m.role == "user" and isinstance(m.content, str) and m.content.strip()]
    loop = starts[-turns:]
    first = loop[0]
    env = {k: v for k, v in os.environ.items() if k.startswith(("SEMHIST_LLM", "OPENAI_", "AZURE_OPENAI"))} if llm else {}
    histories = {v: History(Settings.load(env=env, db=f"sqlite:///{workdir / f'{thread.id}-{i}.db'}",
                                          data_dir=workdir, cache_dir=workdir / "cache", keyword="local",
                                          system_prompt=SYSTEM, layout=v.split(":")[0], llm_timeout=600,
                                          compaction_lookback=COMPACTION_LOOKBACK if llm else 0),
                            llm="auto" if llm else None)
                 for i, v in enumerate(layouts)}
    ids: dict[int, int] = {}
    for h in histories.values():
        result = h.add_many("t", [_raw(m, p) for p, m in enumerate(messages[:first])])
    ids.update(enumerate(result.every_id))
    queries = [q for q in thread.queries if q.has_evidence]
    asked = 0
    records = {(s, layout): [] for s in strategies for layout in layouts}
    recall = {(s, layout): [] for s in strategies for layout in layouts}
    for k, start in enumerate(loop):
        end = loop[k + 1] if k + 1 < len(loop) else len(messages)
        user = messages[start]
        for layout, h in histories.items():
            ids[start] = h.add_many("t", [_raw(user, start)]).every_id[0]
            for name in strategies:
                applied = None if name == "full" else Budget.parse(layout.split(":")[1])
                r = h.ask("t", user.content, strategy=name, budget=applied)  # logged: the cache layout reads it
                previous = records[(name, layout)][-1]["messages"] if records[(name, layout)] else None
                msgs = r.prompt.messages
                records[(name, layout)].append({"messages": msgs, "tokens": prompt_tokens(msgs),
                                                "cached": cached_tokens(previous, msgs), "at": user.timestamp})
        # one benchmark question whose evidence is stored, asked beside the loop
        ready = [q for q in queries if max(q.relevant) < start]
        if ready:
            q = ready[asked % len(ready)]
            asked += 1
            wanted = {ids[p] for p in q.relevant if p in ids}
            for layout, h in histories.items():
                for name in strategies:
                    applied = None if name == "full" else Budget.parse(layout.split(":")[1])
                    r = h.ask("t", q.text, strategy=name, budget=applied, log_turn=False)
                    kept = {r.thread.messages[p].index for p in r.included}
                    recall[(name, layout)].append(len(wanted & kept) / len(wanted) if wanted else 1.0)
        for layout, h in histories.items():
            if end > start + 1:
                added = h.add_many("t", [_raw(m, p) for p, m in enumerate(messages[start + 1:end], start + 1)])
                ids.update(zip(range(start + 1, end), added.every_id))
    for h in histories.values():
        h.close()
    return {"records": records, "recall": recall}


def bills(records: list[dict], lifetime: float | None) -> dict[str, list[float]]:
    """Each turn's billed input per price model (the first turn finds the cache cold)."""
    from semhist.billing import PRICE_MODELS

    out: dict[str, list[float]] = {"openai": [], "anthropic": []}
    for i, r in enumerate(records):
        warm = i > 0 and (lifetime is None or (r["at"] - records[i - 1]["at"]).total_seconds() <= lifetime)
        cached = r["cached"] if warm else 0
        for model in out:
            out[model].append(PRICE_MODELS[model].billed(r["tokens"], cached))
    return out


def summarize(set_name: str, runs: list[dict], strategies, layouts) -> list[dict]:
    rows = []
    for name in strategies:
        for layout in layouts:
            recs = [r["records"][(name, layout)] for r in runs]
            warm_turns = [x for rec in recs for x in rec[1:]]
            row = {"set": set_name, "strategy": name, "layout": layout,
                   "prompt_tokens": round(statistics.fmean(x["tokens"] for rec in recs for x in rec)),
                   "reuse": round(statistics.fmean(x["cached"] / x["tokens"] for x in warm_turns), 3),
                   "recall": round(statistics.fmean(v for r in runs for v in r["recall"][(name, layout)]), 3)
                   if any(r["recall"][(name, layout)] for r in runs) else None}
            for label, lifetime in LIFETIMES.items():
                per = [bills(rec, lifetime) for rec in recs]
                for model in ("openai", "anthropic"):
                    row[f"{model}_{label}"] = round(statistics.fmean(statistics.fmean(p[model]) for p in per))
                    if label == "warm":  # the dearest warm turn (the first turn of a thread is cold)
                        row[f"{model}_max"] = round(max(v for p in per for v in p[model][1:]))
            rows.append(row)
    # `full` is the same prompt in every layout: the head layout's row, else any
    full = {r["set"]: r for r in sorted(rows, key=lambda r: r["layout"].startswith("head")) if r["strategy"] == "full"}
    for r in rows:
        f = full.get(r["set"])
        if f:
            r["vs_full"] = [round(r[f"{m}_warm"] / f[f"{m}_warm"], 2) for m in ("openai", "anthropic")]
    return rows


def upper_edge(rows: list[dict], model: str) -> dict[tuple[str, str], dict | None]:
    """Per (strategy, layout): None where no other row keeps at least its recall for at most
    its bill (warm cache, `model`) and beats it in one of the two, else the best such row."""
    out = {}
    for r in rows:
        if r["recall"] is None:
            continue
        better = [o for o in rows if o is not r and o["recall"] is not None
                  and o[f"{model}_warm"] <= r[f"{model}_warm"] and o["recall"] >= r["recall"]
                  and (o[f"{model}_warm"] < r[f"{model}_warm"] or o["recall"] > r["recall"])]
        out[(r["strategy"], r["layout"])] = max(better, key=lambda o: o["recall"]) if better else None
    return out


def frontier_lines(rows: list[dict]) -> list[str]:
    """The recall each variant keeps against what it bills, cheapest first, and whether it is on
    the upper edge: no other variant keeps as much for less (openai and anthropic warm)."""
    edges = {m: upper_edge(rows, m) for m in ("openai", "anthropic")}
    shown = sorted((r for r in rows if r["recall"] is not None), key=lambda r: r["openai_warm"])
    if len(shown) < 2:
        return []

    def cell(r: dict, model: str) -> str:
        o = edges[model][(r["strategy"], r["layout"])]
        return "yes" if o is None else f"no: {o['strategy']} {o['layout']} keeps {o['recall']} for {o[f'{model}_warm']:,}"

    return ["", "Recall against the bill (warm cache), cheapest first; on the upper edge = no other variant keeps as "
            "much recall for a smaller bill:", ""] + table(
        ["strategy", "layout:budget", "openai warm", "anthropic warm", "recall", "upper edge (openai)",
         "upper edge (anthropic)"],
        [[r["strategy"], r["layout"], f"{r['openai_warm']:,}", f"{r['anthropic_warm']:,}", r["recall"],
          cell(r, "openai"), cell(r, "anthropic")] for r in shown])


def render(results: dict) -> str:
    a = results["args"]
    lines = ["# Cost with the provider's prompt cache: strategies and layouts", "",
             f"`python benchmarks/cache_cost.py {a['command']}` ({results['seconds']:.0f} s). Variants are layout:budget "
             f"(`full` has no budget; 1000b = 1,000 billed tokens), {a['turns']} turns per thread, Teams-shaped "
             "threads. Billed input in "
             "uncached-token equivalents per turn, mean; `vs full` = billed at a warm cache against `full` in the "
             "head layout (openai / anthropic); dearest warm turn = the most one turn bills with the cache warm "
             "(openai / anthropic). Reuse = the share of a prompt's tokens that repeat the previous "
             "turn's prompt. Recall = evidence recall of the benchmark's questions asked along the loop.", ""]
    for set_name, info in results["sets"].items():
        lines += [f"## {set_name}: {info['threads']} thread(s), {info['messages']:,} messages, "
                  f"~{info['tokens']:,} tokens", ""]
        lines += table(["strategy", "layout:budget", "prompt tokens", "reuse", "openai warm", "anthropic warm",
                        "dearest warm turn", "openai 5m / 30m / 1h", "anthropic 5m / 30m / 1h", "vs full", "recall"],
                       [[r["strategy"], r["layout"], f"{r['prompt_tokens']:,}", r["reuse"], f"{r['openai_warm']:,}",
                         f"{r['anthropic_warm']:,}",
                         f"{r['openai_max']:,} / {r['anthropic_max']:,}" if "openai_max" in r else "not recorded",
                         " / ".join(f"{r[f'openai_{x}']:,}" for x in ("5m", "30m", "1h")),
                         " / ".join(f"{r[f'anthropic_{x}']:,}" for x in ("5m", "30m", "1h")),
                         " / ".join(str(v) for v in r.get("vs_full", [])), r["recall"]]
                        for r in info["rows"]])
        lines += frontier_lines(info["rows"])
        if info.get("unsendable"):
            lines += ["", f"Not run: {', '.join(info['unsendable'])} (the whole thread is more than any prompt holds; "
                      "semhist refuses it), so no `vs full` here."]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sets", default="locomo,jmultiwoz,joined", help=f"comma-separated, of {', '.join(SETS)}")
    p.add_argument("--conversations", type=int, default=10, help="threads per set (locomo, jmultiwoz)")
    p.add_argument("--turns", type=int, default=50)
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--variants", default=",".join(VARIANTS), help="layout:budget, the budget in tokens (2000) "
                                                                 "or billed tokens (1000b)")
    p.add_argument("--name", default="cache_cost", help="the result files' name (default: cache_cost)")
    p.add_argument("--llm", action="store_true", help="summarize with the LLM the environment names "
                                                      "(summary, structured); writes cache_cost_memory.md")
    add_out(p)
    add_data(p)
    args = p.parse_args()
    unknown = set(args.sets.split(",")) - set(SETS)
    if unknown:  # an unknown set would be skipped silently and the tables come out empty
        p.error(f"--sets: unknown {', '.join(sorted(unknown))}; valid: {', '.join(SETS)}")
    from semhist.history.views import MAX_PAGED_TOKENS
    from semhist.kernel.tokens import count_message

    strategies, layouts = args.strategies.split(","), args.variants.split(",")
    started = time.perf_counter()
    results: dict = {"sets": {}}
    by_set: dict[str, list] = {}
    for set_name, thread in _threads(args.sets.split(","), args.conversations):
        by_set.setdefault(set_name, []).append(thread)
    with tempfile.TemporaryDirectory(prefix="semhist-cache-cost-") as tmp:
        for set_name, threads in by_set.items():
            tokens = sum(count_message(m.to_openai()) for t in threads for m in t.messages) // len(threads)
            # no prompt holds a thread past the largest context windows: `full` is refused there
            sendable = [n for n in strategies if n != "full" or tokens <= MAX_PAGED_TOKENS]
            runs = [run_thread(t, args.turns, sendable, layouts, Path(tmp), args.llm) for t in threads]
            results["sets"][set_name] = {
                "threads": len(threads), "messages": sum(len(t.messages) for t in threads), "tokens": tokens,
                "rows": summarize(set_name, runs, sendable, layouts),
                "unsendable": [n for n in strategies if n not in sendable]}
    results["seconds"] = time.perf_counter() - started
    command = " ".join(f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in vars(args).items()
                       if k != "out" and v != p.get_default(k))
    results["args"] = {**{k: v for k, v in vars(args).items() if k != "out"}, "command": command}
    save(results, args.out, "cache_cost_memory" if args.llm else args.name, render)


if __name__ == "__main__":
    main()
