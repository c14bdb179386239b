"""Does a detail said once, early and in passing, survive until it is needed?

    semhist llm-server &            # or any OpenAI-compatible endpoint in OPENAI_BASE_URL
    export OPENAI_BASE_URL=http://127.0.0.1:8080/v1 OPENAI_API_KEY=local SEMHIST_LLM_MODEL=qwen2.5-coder-1.5b-instruct-q4_k_m
    python benchmarks/probes.py [--limit N] [--budget 50%]

For every probe thread of data/probes/probes.jsonl and every strategy: is the detail in the
final prompt, how many tokens were sent, how many LLM calls were made. Each strategy gets a
fresh memory store, so its LLM calls are its own. Writes benchmarks/probes.md.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from semhist.indexers.loader import load
from semhist.kernel.budget import Budget
from semhist.kernel.settings import Settings
from semhist import Engine

from common import PROBES as PROBE_DIR, add_out, out_file, write_json

PROBES = PROBE_DIR / "probes.jsonl"
VARIANTS = {  # label: (strategy, blocks_memory, budget or None for --budget)
    "full": ("full", "none", None), "window": ("window", "none", None),
    "token-budget": ("token-budget", "none", None), "summary": ("summary", "none", None),
    "structured": ("structured", "none", None), "utterances": ("utterances", "none", None),
    "blocks": ("blocks", "none", None), "blocks+structured": ("blocks", "structured", None),
    # the same retention with a smaller budget is the point of carrying the list with blocks
    "blocks+structured @35%": ("blocks", "structured", "35%"),
    "summary @35%": ("summary", "none", "35%"),
}


KINDS = {"constraint_probe": "statement", "request_probe": "in a request", "supersession_probe": "changed later",
         "casual_probe": "casual JA"}


def queries() -> dict[str, dict]:
    """Each probe's query as written (detail, stale, never_noted: see make_probes.py)."""
    with PROBES.open(encoding="utf-8") as f:
        return {t["id"]: t["queries"][0] for t in map(json.loads, f)}


def run(limit: int | None, budget: str, variants: list[str]) -> dict:
    threads = load(PROBES).threads
    if limit:  # an even share of each language
        ja = [t for t in threads if t.language == "ja"][: (limit + 1) // 2]
        en = [t for t in threads if t.language == "en"][: limit // 2]
        threads = ja + en
    wanted = queries()
    out = {}
    for label in variants:
        strategy, memory, own_budget = VARIANTS[label]
        with tempfile.TemporaryDirectory() as tmp:
            engine = Engine(Settings.load(cache_dir=tmp, blocks_memory=memory))
            kept, tokens, calls, full, seconds, stale, noted = [], [], [], [], [], [], []
            for thread in threads:
                query = thread.queries[0].text
                start = time.perf_counter()
                result = engine.ask(thread, query, strategy=strategy, budget=Budget.parse(own_budget or budget))
                seconds.append(time.perf_counter() - start)
                text = "\n".join(str(m.get("content") or "") for m in result.prompt.messages)
                query = wanted[thread.id]
                kept.append(all(d in text for d in query["detail"]))
                # the old value sent too (the model must tell which one holds), and requests filed
                # as statements by the structured list: each counted where the probe has them
                if query.get("stale"):
                    stale.append(any(d in text for d in query["stale"]))
                notes = result.memory.notes if result.memory else []
                noted.extend(any(plain in n.quote for n in notes) for plain in query.get("never_noted", []))
                tokens.append(result.prompt.tokens)
                full.append(result.full_tokens)
                calls.append(result.llm_calls)
        out[label] = {"kept": sum(kept), "n": len(kept), "share": round(sum(kept) / len(kept), 3),
                      "mean_tokens": round(sum(tokens) / len(tokens), 1),
                      "token_ratio": round(sum(tokens) / sum(full), 3),
                      "llm_calls": sum(calls), "seconds": round(sum(seconds), 1),
                      "missed": [t.id for t, k in zip(threads, kept) if not k], "budget": own_budget or budget,
                      "by_kind": {kind: [sum(k for t, k in zip(threads, kept) if wanted[t.id]["category"] == kind),
                                         sum(wanted[t.id]["category"] == kind for t in threads)] for kind in KINDS},
                      "stale_sent": [sum(stale), len(stale)], "requests_noted": [sum(noted), len(noted)]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, help="only N probes (half Japanese, half English)")
    parser.add_argument("--budget", default="50%")
    parser.add_argument("--strategy", action="append", choices=list(VARIANTS))
    add_out(parser)
    args = parser.parse_args()
    results = run(args.limit, args.budget, args.strategy or list(VARIANTS))
    model = Settings.load().llm.model if Settings.load().llm else "none"
    lines = ["# Probe set: a detail said once, needed later", "",
             f"Generated by `python benchmarks/probes.py --budget {args.budget}"
             f"{''.join(f' --strategy {v}' for v in args.strategy or [])}` with LLM `{model}`; "
             f"{next(iter(results.values()))['n']} probes (data/probes/probes.jsonl).", "",
             "| strategy | budget | detail in prompt | share | mean prompt tokens | tokens / full | LLM calls | seconds | missed |",
             "|---|---|---|---|---|---|---|---|---|"]
    for label, r in results.items():
        missed = ", ".join(r["missed"]) if len(r["missed"]) < r["n"] else "all"
        lines.append(f"| {label} | {r['budget']} | {r['kept']}/{r['n']} | {r['share']} | {r['mean_tokens']} | "
                     f"{r['token_ratio']} | {r['llm_calls']} | {r['seconds']} | {missed or '-'} |")
    lines += ["", "By kind of probe (detail in prompt), the old value of a changed detail sent as well, and plain "
              "requests filed as user statements by the structured list:", "",
              "| strategy | " + " | ".join(KINDS.values()) + " | old value also sent | requests filed as statements |",
              "|---|" + "---|" * (len(KINDS) + 2)]
    for label, r in results.items():
        kinds = [f"{k}/{n}" if n else "-" for k, n in r["by_kind"].values()]
        lines.append(f"| {label} | " + " | ".join(kinds) + f" | {r['stale_sent'][0]}/{r['stale_sent'][1]} | "
                     f"{r['requests_noted'][0]}/{r['requests_noted'][1]} |")
    out_file(args.out, "probes.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_json(args.out / "probes.json", results)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
