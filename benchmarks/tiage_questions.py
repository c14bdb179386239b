"""English training requests a shipped ranker may learn from: TIAGE's chats (MIT) made into long
Teams-shaped threads of named people, with questions written by the packaged local model.

    semhist llm-server --port 8093 &           # the packaged Qwen2.5-Coder-1.5B, ~3 s a question here
    OPENAI_BASE_URL=http://127.0.0.1:8093/v1 python benchmarks/tiage_questions.py
    # writes data/benchmarks/tiage_chats.jsonl.xz (about 30 minutes on 2 cores; a rerun goes on)

Why: the ranker that ships as the default may only be fitted on data whose licence lets it ship in
an Apache-2.0 package (issue 52). LoCoMo, the English set with real questions, is CC BY-NC 4.0;
JMultiWOZ (CC BY-SA 4.0) is Japanese and names no speakers, so a fit on it alone never learns
that "what did Caroline say" means Caroline's messages. TIAGE's PersonaChat text is MIT.

How the threads are made (seeded, the same on every run):
- TIAGE's `train` dialogues make the `tune` threads, its `dev` dialogues the `held` ones, 50
  dialogues a thread; each thread has a cast of six people and each dialogue two of them, so a
  person's name is on many conversations, as in a team's long thread.
- A dialogue starts 30 minutes to 3 days after the last one; its messages come in bursts.
- Per dialogue: one or two lines (six words or more, not a question) each get a question the
  local model writes, naming the line's author in other words than the line's (`fact`; gold:
  the line), and one templated request for the whole conversation by its date and people
  (`conversation`; gold: its messages).
The model's questions are kept only when they end with a question mark and name the author.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import random
import sys
import time
import urllib.request
from datetime import datetime, timedelta

from common import SHIPPED_DATA, add_out, data_file

PER_THREAD = 50
CAST = ("Priya", "Tom", "Keiko", "Marcus", "Lena", "Diego", "Aisha", "Jonas", "Mei", "Oliver", "Fatima",
        "Sam", "Nadia", "Ravi", "Clara", "Hugo", "Yara", "Ben")
NAME = "tiage_chats.jsonl.xz"
PROMPT = ("In a chat, {name} wrote: \"{text}\"\nWrite one short question that this line answers, naming "
          "{name}, in other words than the line's. Reply with the question only.")


def _lines(dialogue: list[dict], rng: random.Random, k: int) -> list[int]:
    """Up to `k` lines of a dialogue worth a question: six words or more, not a question."""
    ok = [i for i, m in enumerate(dialogue) if len(m["content"].split()) >= 6 and "?" not in m["content"]]
    return sorted(rng.sample(ok, min(k, len(ok))))


def _ask(base: str, name: str, text: str, timeout: float) -> str:
    body = json.dumps({"model": os.environ.get("SEMHIST_LLM_MODEL", "local"), "temperature": 0, "max_tokens": 40,
                       "messages": [{"role": "user", "content": PROMPT.format(name=name, text=text)}]}).encode()
    req = urllib.request.Request(f"{base.rstrip('/')}/chat/completions", body,
                                 {"content-type": "application/json", "authorization": "Bearer local"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)["choices"][0]["message"]["content"].strip().strip('"').splitlines()[0].strip()


def build(dialogues: list[dict], split: str, seed: int) -> list[dict]:
    """Threads of PER_THREAD dialogues with names, times and the requests still to write."""
    rng = random.Random(seed)
    threads = []
    for t in range(0, len(dialogues), PER_THREAD):
        cast = rng.sample(CAST, 6)
        clock = datetime(2024, 3, 4, 9, 0) + timedelta(days=rng.randint(0, 60))
        messages, queries = [], []
        for d in dialogues[t:t + PER_THREAD]:
            a, b = rng.sample(cast, 2)
            clock += timedelta(minutes=rng.uniform(30, 3 * 24 * 60))
            start = len(messages)
            for i, m in enumerate(d["messages"]):
                clock += timedelta(seconds=rng.choice((8, 15, 25, 40, 70, 180)))
                messages.append({"role": m["role"], "content": m["content"], "speaker": a if i % 2 == 0 else b,
                                 "timestamp": clock.isoformat(timespec="seconds"), "dialogue_id": d["id"]})
            day = datetime.fromisoformat(messages[start]["timestamp"])
            queries.append({"query": f"What did {a} and {b} talk about on {day:%A, %B} {day.day}?",
                            "relevant_message_indices": list(range(start, len(messages))), "category": "conversation"})
            for i in _lines(d["messages"], rng, 2 if split == "tune" else 1):
                queries.append({"ask": [messages[start + i]["speaker"], d["messages"][i]["content"]],
                                "relevant_message_indices": [start + i], "category": "fact"})
        threads.append({"id": f"tiage_{split}_{t // PER_THREAD}", "language": "en", "split": split,
                        "source": "TIAGE (MIT) dialogues; names, times and questions are synthetic "
                                  "(benchmarks/tiage_questions.py)", "messages": messages, "queries": queries})
    return threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out(parser, SHIPPED_DATA)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--limit", type=int, help="write only the first N questions (a quick run)")
    args = parser.parse_args()
    base = os.environ.get("OPENAI_BASE_URL")
    if not base:
        raise SystemExit("no LLM configured: start `semhist llm-server` and export the OPENAI_BASE_URL it prints")
    rows = [json.loads(line) for line in data_file("tiage.jsonl").read_text(encoding="utf-8").splitlines() if line]
    threads = build([r for r in rows if r["split"] == "train"], "tune", 52) + \
        build([r for r in rows if r["split"] == "dev"], "held", 53)
    args.out.mkdir(parents=True, exist_ok=True)
    done_file = args.out / "tiage_chats.jsonl.partial.json"  # questions written so far: a rerun goes on
    done = json.loads(done_file.read_text(encoding="utf-8")) if done_file.exists() else {}
    todo = [q for t in threads for q in t["queries"] if "ask" in q][:args.limit]
    began = time.perf_counter()
    for n, q in enumerate(todo, 1):
        key = "\t".join(q["ask"])
        if key not in done:
            done[key] = _ask(base, *q["ask"], args.timeout)
            done_file.write_text(json.dumps(done, ensure_ascii=False), encoding="utf-8")
        if n % 20 == 0:
            print(f"{n}/{len(todo)} questions, {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
    kept = dropped = 0
    for t in threads:
        out = []
        for q in t["queries"]:
            if "ask" in q:
                name, line = q.pop("ask")
                text = done.get(f"{name}\t{line}", "")  # "": not asked (--limit)
                if not text.endswith("?") or name not in text:
                    dropped += 1
                    continue
                q = {"query": text, **q}
                kept += 1
            out.append(q)
        t["queries"] = out
    with lzma.open(args.out / NAME, "wt", encoding="utf-8", preset=9) as f:
        f.writelines(json.dumps(t, ensure_ascii=False) + "\n" for t in threads)
    done_file.unlink()
    print(json.dumps({"out": str(args.out / NAME), "threads": len(threads), "questions kept": kept, "dropped": dropped,
                      "messages": sum(len(t["messages"]) for t in threads)}))


if __name__ == "__main__":
    main()
