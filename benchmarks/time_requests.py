"""Time-anchored requests on the public JMultiWOZ threads: "5月8日の21時台に話した内容",
"What did we talk about on May 8, 2024 at 9 pm?", "…on May 8?".

    python benchmarks/time_requests.py [--out FILE]   # writes the query set as JSON Lines

A request for an hour means the conversations that *started* in that hour, to their end: not
every message stamped 21:xx, not the whole day. The dialogue ids of JMultiWOZ give the gold:
every message of each dialogue whose first message falls in the named hour (or day). Two
variants of the threads:

- spaced: the file's own timestamps (dialogues 30 minutes to 3 days apart, so the time gaps
  alone find where a conversation ends);
- close: half of the dialogues start 20-50 s after the one before ends, as sessions of a real
  chat often do; then only the topic tells where one conversation ends and the next begins.

benchmarks/limits.py scores `blocks` on both (recall of the gold messages at 5/10/25%).
"""

from __future__ import annotations

import argparse
import json
import random
import zlib
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

from indexers.loader import load
from indexers.model import Query, Thread

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "jmultiwoz_threads.jsonl"
PER_THREAD = 6  # requests per thread: hour and day, Japanese and English, alternating
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")


def dialogues(path: Path) -> dict[str, list[list[int]]]:
    """Per thread id: the message positions of each dialogue, in order (annotations the loader
    drops, read here for the gold only)."""
    out = {}
    with path.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            runs: list[list[int]] = []
            for i, m in enumerate(row["messages"]):
                if not runs or row["messages"][runs[-1][-1]]["dialogue_id"] != m["dialogue_id"]:
                    runs.append([])
                runs[-1].append(i)
            out[row["id"]] = runs
    return out


def close_up(thread: Thread, runs: list[list[int]]) -> Thread:
    """Half of the dialogues (chosen by a seed from the thread id) start 20-50 s after the
    previous one ends; the spacing inside a dialogue and the other gaps are kept."""
    rng = random.Random(zlib.crc32(thread.id.encode()))
    original = [m.timestamp for m in thread.messages]
    times = list(original)
    shift = timedelta(0)  # how much earlier everything from this dialogue on now happens
    for prev, run in zip(runs, runs[1:]):
        if rng.random() < 0.5:
            shift += original[run[0]] - original[prev[-1]] - timedelta(seconds=rng.randint(20, 50))
        for i in run:
            times[i] = original[i] - shift
    return replace(thread, messages=tuple(replace(m, timestamp=t) for m, t in zip(thread.messages, times)))


def _hour_12(hour: int) -> str:
    return f"{hour % 12 or 12} {'am' if hour < 12 else 'pm'}"


def request(kind: str, lang: str, t: datetime) -> str:
    if kind == "hour":
        return (f"{t.month}月{t.day}日の{t.hour}時台に話した内容を教えて。" if lang == "ja" else
                f"What did we talk about on {MONTHS[t.month - 1]} {t.day}, {t.year} at {_hour_12(t.hour)}?")
    return (f"{t.year}年{t.month}月{t.day}日に話したことをまとめて。" if lang == "ja" else
            f"Summarize what we discussed on {MONTHS[t.month - 1]} {t.day}, {t.year}.")


def with_queries(thread: Thread, runs: list[list[int]]) -> Thread:
    """PER_THREAD requests for dialogues spread over the thread; gold: the dialogues that
    started in the hour (or on the day) the request names."""
    starts = [thread.messages[r[0]].timestamp for r in runs]
    queries = []
    for n in range(PER_THREAD):
        t = starts[(n * len(runs)) // PER_THREAD]
        kind, lang = ("hour", "day")[n % 3 == 2], ("ja", "en")[n % 2]
        key = (lambda s: (s.date(), s.hour)) if kind == "hour" else (lambda s: s.date())
        gold = tuple(i for r, s in zip(runs, starts) if key(s) == key(t) for i in r)
        queries.append(Query(request(kind, lang, t), gold, f"{kind}_{lang}"))
    return replace(thread, queries=tuple(queries))


def time_threads(threads: list[Thread], path: Path = DATA) -> dict[str, list[Thread]]:
    """{"spaced": threads with their own timestamps, "close": dialogues closed up}, each thread
    carrying its time-anchored requests instead of the file's queries."""
    runs = dialogues(path)
    spaced = [with_queries(t, runs[t.id]) for t in threads]
    close = [with_queries(close_up(t, runs[t.id]), runs[t.id]) for t in threads]
    return {"spaced": spaced, "close": close}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--out", default="time_requests.jsonl", help="the close variant, as JSON Lines")
    args = parser.parse_args()
    variants = time_threads(load(args.data).threads, Path(args.data))
    with open(args.out, "w", encoding="utf-8") as f:
        for t in variants["close"]:
            f.write(json.dumps({"id": t.id, "language": t.language, "messages": [
                {"role": m.role, "content": m.content, "timestamp": m.timestamp.isoformat(), "name": m.name}
                for m in t.messages], "queries": [
                {"query": q.text, "relevant_message_indices": list(q.relevant), "category": q.category}
                for q in t.queries]}, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}: {sum(len(t.queries) for t in variants['close'])} requests "
          "(the close variant; `semhist eval` scores it)")


if __name__ == "__main__":
    main()
