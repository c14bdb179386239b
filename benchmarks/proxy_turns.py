"""A bot's turns through `semhist serve`'s POST /v1/chat/completions, against the same bot
sending its whole history to the model directly: what the model is sent (its own
`usage.prompt_tokens`), how long a turn takes, and whether the answer holds the gold answer.

    semhist llm-server --port 8080 &              # or any OpenAI-compatible endpoint
    python benchmarks/proxy_turns.py --upstream http://127.0.0.1:8080/v1

The history is the start of LoCoMo's first conversation, cut where it fits the local model's
context (--history-tokens); the requests are its questions whose evidence lies in that part.
Both bots are the official `openai` client; the two paths alternate which goes first.
Writes benchmarks/proxy_turns.json and benchmarks/proxy_turns.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import string
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter

import httpx

from semhist.kernel.tokens import count_message

from common import add_data, add_out, data_file, out_file, write_json
SYSTEM = "Answer the question about the conversation in a few words."


def history_and_questions(history_tokens: int, turns: int) -> tuple[list[dict], list[dict]]:
    thread = json.loads(data_file("locomo.jsonl").read_text(encoding="utf-8").splitlines()[0])
    kept, total = [], 0
    for m in thread["messages"]:
        total += count_message(m)
        if total > history_tokens:
            break
        kept.append({"role": m["role"], "content": m["content"], "timestamp": m["timestamp"], "name": m["speaker"]})
    asked = [q for q in thread["queries"] if q.get("answer") and q["relevant_message_indices"]
             and max(q["relevant_message_indices"]) < len(kept) and q["category"] != "locomo_cat5"]
    step = max(1, len(asked) // turns)
    return kept, asked[::step][:turns]


def f1(answer: str, gold: str) -> float:
    """LoCoMo's token F1: lower case, no punctuation or articles."""
    def tokens(text: str) -> list[str]:
        text = "".join(c for c in str(text).lower() if c not in string.punctuation)
        return re.sub(r"\b(a|an|the|and)\b", " ", text).split()

    a, g = tokens(answer), tokens(gold)
    common = sum((Counter(a) & Counter(g)).values())
    if not common:
        return 0.0
    precision, recall = common / len(a), common / len(g)
    return 2 * precision * recall / (precision + recall)


def serve(upstream: str, port: int, data_dir: str, layout: str) -> subprocess.Popen:
    env = {**os.environ, "SEMHIST_DATA_DIR": data_dir, "SEMHIST_LAYOUT": layout}
    proc = subprocess.Popen([sys.executable, "-m", "semhist.cli", "serve", "--port", str(port),
                             "--upstream", upstream], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("semhist serve did not start")


def turn(client, model: str, messages: list[dict], max_tokens: int) -> dict:
    start = time.perf_counter()
    raw = client.chat.completions.with_raw_response.create(model=model, messages=messages, max_tokens=max_tokens,
                                                           temperature=0)
    reply = raw.parse()
    return {"s": time.perf_counter() - start, "prompt_tokens": reply.usage.prompt_tokens,
            "cached_tokens": _cached(raw.http_response.json()), "answer": reply.choices[0].message.content or "",
            "semhist_tokens": int(raw.headers.get("x-semhist-prompt-tokens") or 0)}


def _cached(body: dict) -> int | None:
    """The prompt tokens the server read from its cache: OpenAI's usage field, or llama.cpp's
    timings (the prompt it evaluated is what was not cached)."""
    details = (body.get("usage") or {}).get("prompt_tokens_details") or {}
    if isinstance(details.get("cached_tokens"), int):
        return details["cached_tokens"]
    timings = body.get("timings") or {}
    if isinstance(timings.get("cache_n"), int):
        return timings["cache_n"]
    return None


def run(args) -> dict:
    import openai

    history, questions = history_and_questions(args.history_tokens, args.turns)
    port = args.port
    with tempfile.TemporaryDirectory() as data_dir:
        proc = serve(args.upstream, port, data_dir, args.layout)
        try:
            base = f"http://127.0.0.1:{port}"
            for at in range(0, len(history), 200):  # the service takes at most 256 messages a request
                httpx.post(f"{base}/v1/threads/locomo/messages", json={"messages": history[at:at + 200]},
                           timeout=300).raise_for_status()
            headers = {"X-Semhist-Thread": "locomo", **({"X-Semhist-Budget": args.budget} if args.budget else {})}
            proxied = openai.OpenAI(base_url=base + "/v1", api_key="unused", timeout=1800, max_retries=0,
                                    default_headers=headers)
            direct = openai.OpenAI(base_url=args.upstream, api_key="unused", timeout=1800, max_retries=0)
            kept = [{"role": m["role"], "content": m["content"]} for m in history]  # what a plain bot keeps
            rows = []
            for i, q in enumerate(questions):
                ask = {"role": "user", "content": q["query"]}
                paths = [("semhist", lambda: turn(proxied, args.model, [{"role": "system", "content": SYSTEM}, ask],
                                                  args.max_tokens)),
                         ("direct", lambda: turn(direct, args.model, [{"role": "system", "content": SYSTEM}, *kept,
                                                                      ask], args.max_tokens))]
                row = {"query": q["query"], "gold": q["answer"], "category": q["category"]}
                for name, call in paths if i % 2 == 0 else paths[::-1]:
                    row[name] = call()
                    row[name]["f1"] = round(f1(row[name]["answer"], q["answer"]), 3)
                kept += [ask, {"role": "assistant", "content": row["direct"]["answer"]}]
                rows.append(row)
                print(f"{i + 1}/{len(questions)} semhist {row['semhist']['s']:.1f} s / {row['semhist']['prompt_tokens']}"
                      f" tok, direct {row['direct']['s']:.1f} s / {row['direct']['prompt_tokens']} tok", flush=True)
            log = httpx.get(f"{base}/v1/threads/locomo/log", timeout=60).json()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return {"history_messages": len(history), "model": args.model, "rows": rows, "layout": args.layout,
            "budget": args.budget,
            "semhist_ask_ms": [t["timings_ms"]["total_ms"] for t in log]}


def summary(result: dict) -> dict:
    out = {}
    for name in ("semhist", "direct"):
        rows = [r[name] for r in result["rows"]]
        seconds = sorted(r["s"] for r in rows)
        cached = [r["cached_tokens"] for r in rows[1:] if r.get("cached_tokens") is not None]
        out[name] = {"prompt_tokens_mean": round(statistics.mean(r["prompt_tokens"] for r in rows), 1),
                     "cached_share": round(sum(cached) / sum(r["prompt_tokens"] for r in rows[1:]), 3)
                     if cached else None,
                     "turn_s_p50": round(statistics.median(seconds), 2), "turn_s_max": round(seconds[-1], 2),
                     "turn_s_mean": round(statistics.mean(seconds), 2),
                     "answer_f1": round(statistics.mean(r["f1"] for r in rows), 3)}
    out["ratio"] = {k: round(out["semhist"][k] / out["direct"][k], 3) if out["direct"][k] else None
                    for k in ("prompt_tokens_mean", "turn_s_p50", "turn_s_mean", "answer_f1")}
    out["semhist_ask_ms_p50"] = round(statistics.median(result["semhist_ask_ms"]), 1)
    return out


def write_md(result: dict, stats: dict, command: str) -> str:
    lines = ["# A bot's turns through /v1/chat/completions vs its whole history sent directly", "",
             f"`{command}` — model `{result['model']}`, {result['history_messages']} messages of LoCoMo "
             f"conv-26 as the history, {len(result['rows'])} questions; semhist's layout "
             f"`{result.get('layout')}`, budget {result.get('budget') or 'the server default'}. Cached: the share "
             "of the prompt tokens after the first turn the server read from its prefix cache (its own count).", "",
             "| path | model prompt tokens (mean) | cached | turn p50 s | turn mean s | turn max s (the first, cold) "
             "| answer token F1 |", "|---|---|---|---|---|---|---|"]
    for name in ("semhist", "direct"):
        s = stats[name]
        lines.append(f"| {name} | {s['prompt_tokens_mean']} | {s.get('cached_share')} | {s['turn_s_p50']} | "
                     f"{s.get('turn_s_mean')} | {s['turn_s_max']} | {s['answer_f1']} |")
    r = stats["ratio"]
    lines += ["", f"semhist / direct: prompt tokens {r['prompt_tokens_mean']}, turn time p50 {r['turn_s_p50']} "
              f"(mean {r.get('turn_s_mean')}), answer F1 {r['answer_f1']}; semhist's own ask (keyword, search, "
              f"packing) p50 {stats['semhist_ask_ms_p50']} ms. The first turn finds no prompt in the server's "
              "cache (a new thread, or one whose cache expired); the later ones find the previous prompt.", "",
              "llama.cpp's server keeps the previous prompt and evaluates only what follows the common "
              "prefix. The direct bot's history only grows, so a turn evaluates its few new tokens. In "
              "the head layout semhist's prompt changes near its head (the retrieved context follows the "
              "system prompt), so a turn evaluates all of it; in the cache layout the prompt keeps its "
              "start (the recent turns and what earlier turns retrieved) and a turn evaluates its new "
              "exchange and its new retrieval. Hosted APIs bill such cached input at a discount too.", "",
              "| question | gold | semhist answer | direct answer |", "|---|---|---|---|"]
    for row in result["rows"]:
        cell = lambda text: str(text).replace("|", "/").replace("\n", " ")[:90]  # noqa: E731
        lines.append(f"| {cell(row['query'])} | {cell(row['gold'])} | {cell(row['semhist']['answer'])} | "
                     f"{cell(row['direct']['answer'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", default="http://127.0.0.1:8080/v1")
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--history-tokens", type=int, default=6000,
                        help="the packaged model takes 8,192 tokens; start it with --ctx-size 16384 for more")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--layout", default="cache", choices=["head", "cache"], help="semhist's prompt layout")
    parser.add_argument("--budget", default="1000b", help="X-Semhist-Budget: tokens, a share, or billed tokens "
                                                          "(1000b); empty: the server's default")
    parser.add_argument("--name", default="proxy_turns", help="the result files' name (NAME.json, NAME.md)")
    add_out(parser)
    add_data(parser)
    args = parser.parse_args()
    result = run(args)
    stats = summary(result)
    write_json(out_file(args.out, f"{args.name}.json"), {**result, "summary": stats})
    command = "python benchmarks/proxy_turns.py " + " ".join(sys.argv[1:])
    (args.out / f"{args.name}.md").write_text(write_md(result, stats, command.strip()), encoding="utf-8")
    print(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
