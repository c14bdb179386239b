"""Time-anchored requests on the public JMultiWOZ threads: "5月8日の21時台に話した内容",
"What did we talk about on May 8, 2024 at 9 pm?", "…on May 8?".

    python benchmarks/time_requests.py [--variant close] [--out FILE]   # one variant as JSON Lines

A request for an hour means the conversations that *started* in that hour, to their end: not
every message stamped 21:xx, not the whole day. The dialogue ids of JMultiWOZ give the gold:
every message of each dialogue whose first message falls in the named hour (or day). Three
variants of the threads:

- spaced: the file's own timestamps (dialogues 30 minutes to 3 days apart, so the time gaps
  alone find where a conversation ends);
- close: half of the dialogues start 20-50 s after the one before ends, as sessions of a real
  chat often do; then only the topic tells where one conversation ends and the next begins.
- long: consecutive dialogues joined into conversations of 60-200 messages, each dialogue
  starting 30-60 s after the one before ends (a user's sessions of one evening); each
  conversation keeps its first dialogue's time. A conversation is then several blocks (they
  are cut at max_block_tokens), and the hour a request names often begins inside one. The
  file's threads are joined one after another into threads of more than 5,000 messages (an
  hour of such a conversation is a quarter of one file thread, more than a 25% budget of it
  could hold), which requests read through candidate views, as a long chat's.

benchmarks/limits.py scores `blocks` on each (recall of the gold messages at 5/10/25%).
"""

from __future__ import annotations

import argparse
import json
import random
import zlib
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

from semhist.indexers.loader import load
from semhist.kernel.model import Query, Thread

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


LONG = (60, 200)  # messages of a conversation in the long variant
SESSION_PAUSE = (30, 60)  # seconds between its dialogues


def join_up(thread: Thread, runs: list[list[int]]) -> Thread:
    """Consecutive dialogues joined into conversations of LONG messages (each conversation's
    size drawn by a seed from the thread id): inside one, each dialogue starts SESSION_PAUSE
    seconds after the one before ends; a conversation starts at its first dialogue's own time,
    so the file's gaps (44 minutes or more) stay between conversations."""
    rng = random.Random(zlib.crc32(thread.id.encode()) ^ 1)
    original = [m.timestamp for m in thread.messages]
    times = list(original)
    size, wanted = 0, 0
    shift = timedelta(0)
    for prev, run in zip([None, *runs], runs):
        if prev is None or size >= wanted:  # a new conversation, at its own time
            size, wanted, shift = 0, rng.randint(*LONG), timedelta(0)
        else:
            shift += original[run[0]] - original[prev[-1]] - timedelta(seconds=rng.randint(*SESSION_PAUSE))
        size += len(run)
        for i in run:
            times[i] = original[i] - shift
    return replace(thread, messages=tuple(replace(m, timestamp=t) for m, t in zip(thread.messages, times)))


# Messages of a thread of the long variant: past the default view_limit (5,000), so requests
# read it through candidate views, as they read a user's chat of many months.
LONG_THREAD = 5_000


def one_after_another(threads: list[Thread],
                      runs: dict[str, list[list[int]]]) -> list[tuple[Thread, list[list[int]], int]]:
    """The file's threads joined in order until each joined thread passes LONG_THREAD messages
    (the last few go to the one before), each moved by whole days (the hours stay) to start the
    day after the one before ends; with their dialogues' positions and how many were joined."""
    groups: list[list[Thread]] = [[]]
    for t in threads:
        if sum(len(x.messages) for x in groups[-1]) > LONG_THREAD:
            groups.append([])
        groups[-1].append(t)
    if len(groups) > 1 and sum(len(x.messages) for x in groups[-1]) <= LONG_THREAD:
        last = groups.pop()
        groups[-1] += last
    out = []
    for group in groups:
        messages: list = []
        joined: list[list[int]] = []
        for t in group:
            days = (messages[-1].timestamp.date() - t.messages[0].timestamp.date()).days + 1 if messages else 0
            joined += [[len(messages) + i for i in run] for run in runs[t.id]]
            messages += [replace(m, index=len(messages) + m.index, timestamp=m.timestamp + timedelta(days=days))
                         for m in t.messages]
        out.append((replace(group[0], id=f"{group[0].id}+{len(group) - 1}", messages=tuple(messages)), joined,
                    len(group)))
    return out


def _hour_12(hour: int) -> str:
    return f"{hour % 12 or 12} {'am' if hour < 12 else 'pm'}"


def request(kind: str, lang: str, t: datetime, year: bool = False) -> str:
    """`year`: the Japanese hour names its year (a date without one is the latest such date)."""
    if kind == "hour":
        day = f"{t.year}年{t.month}月{t.day}日" if year else f"{t.month}月{t.day}日"
        return (f"{day}の{t.hour}時台に話した内容を教えて。" if lang == "ja" else
                f"What did we talk about on {MONTHS[t.month - 1]} {t.day}, {t.year} at {_hour_12(t.hour)}?")
    return (f"{t.year}年{t.month}月{t.day}日に話したことをまとめて。" if lang == "ja" else
            f"Summarize what we discussed on {MONTHS[t.month - 1]} {t.day}, {t.year}.")


def with_queries(thread: Thread, runs: list[list[int]], per_thread: int = PER_THREAD) -> Thread:
    """`per_thread` requests for dialogues spread over the thread; gold: the dialogues that
    started in the hour (or on the day) the request names."""
    starts = [thread.messages[r[0]].timestamp for r in runs]
    queries = []
    for n in range(per_thread):
        t = starts[(n * len(runs)) // per_thread]
        kind, lang = ("hour", "day")[n % 3 == 2], ("ja", "en")[n % 2]
        key = (lambda s: (s.date(), s.hour)) if kind == "hour" else (lambda s: s.date())
        gold = tuple(i for r, s in zip(runs, starts) if key(s) == key(t) for i in r)
        year = thread.messages[-1].timestamp - t > timedelta(days=300)  # a long thread's earlier years
        queries.append(Query(request(kind, lang, t, year), gold, f"{kind}_{lang}"))
    return replace(thread, queries=tuple(queries))


def time_threads(threads: list[Thread], path: Path = DATA) -> dict[str, list[Thread]]:
    """{"spaced": threads with their own timestamps, "close": dialogues closed up, "long":
    dialogues joined into long conversations}, each thread carrying its time-anchored requests
    instead of the file's queries."""
    runs = dialogues(path)
    spaced = [with_queries(t, runs[t.id]) for t in threads]
    close = [with_queries(close_up(t, runs[t.id]), runs[t.id]) for t in threads]
    long = [with_queries(join_up(t, r), r, PER_THREAD * n) for t, r, n in one_after_another(threads, runs)]
    return {"spaced": spaced, "close": close, "long": long}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--variant", default="close", choices=("spaced", "close", "long"))
    parser.add_argument("--out", default="time_requests.jsonl", help="the variant's threads, as JSON Lines")
    args = parser.parse_args()
    threads = time_threads(load(args.data).threads, Path(args.data))[args.variant]
    with open(args.out, "w", encoding="utf-8") as f:
        for t in threads:
            f.write(json.dumps({"id": t.id, "language": t.language, "messages": [
                {"role": m.role, "content": m.content, "timestamp": m.timestamp.isoformat(), "name": m.name}
                for m in t.messages], "queries": [
                {"query": q.text, "relevant_message_indices": list(q.relevant), "category": q.category}
                for q in t.queries]}, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}: {sum(len(t.queries) for t in threads)} requests "
          f"(the {args.variant} variant; `semhist eval` scores it)")


if __name__ == "__main__":
    main()
