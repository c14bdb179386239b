"""Time-anchored requests on JMultiWOZ's threads, in three variants of their timing (a part of
time_requests.py, which writes them, and limits.py, which scores them; no main)."""

from __future__ import annotations

import random
import zlib
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from common import data_file, dialogues

if TYPE_CHECKING:
    from semhist.kernel.model import Thread

PER_THREAD = 6  # requests per thread: hour and day, Japanese and English, alternating
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
LONG = (60, 200)  # messages of a conversation in the long variant
SESSION_PAUSE = (30, 60)  # seconds between its dialogues
# Messages of a thread of the long variant: past the default view_limit (5,000), so requests
# read it through candidate views, as they read a user's chat of many months.
LONG_THREAD = 5_000


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


def time_request(kind: str, lang: str, t: datetime, year: bool = False) -> str:
    """`year`: the Japanese hour names its year (a date without one is the latest such date)."""
    if kind == "hour":
        day = f"{t.year}年{t.month}月{t.day}日" if year else f"{t.month}月{t.day}日"
        return (f"{day}の{t.hour}時台に話した内容を教えて。" if lang == "ja" else
                f"What did we talk about on {MONTHS[t.month - 1]} {t.day}, {t.year} at {_hour_12(t.hour)}?")
    return (f"{t.year}年{t.month}月{t.day}日に話したことをまとめて。" if lang == "ja" else
            f"Summarize what we discussed on {MONTHS[t.month - 1]} {t.day}, {t.year}.")


def with_time_queries(thread: Thread, runs: list[list[int]], per_thread: int = PER_THREAD) -> Thread:
    """`per_thread` requests for dialogues spread over the thread; gold: the dialogues that
    started in the hour (or on the day) the request names."""
    from semhist.kernel.model import Query

    starts = [thread.messages[r[0]].timestamp for r in runs]
    queries = []
    for n in range(per_thread):
        t = starts[(n * len(runs)) // per_thread]
        kind, lang = ("hour", "day")[n % 3 == 2], ("ja", "en")[n % 2]
        key = (lambda s: (s.date(), s.hour)) if kind == "hour" else (lambda s: s.date())
        gold = tuple(i for r, s in zip(runs, starts) if key(s) == key(t) for i in r)
        year = thread.messages[-1].timestamp - t > timedelta(days=300)  # a long thread's earlier years
        queries.append(Query(time_request(kind, lang, t, year), gold, f"{kind}_{lang}"))
    return replace(thread, queries=tuple(queries))


def time_threads(threads: list[Thread], path: Path | None = None) -> dict[str, list[Thread]]:
    """{"spaced": threads with their own timestamps, "close": dialogues closed up, "long":
    dialogues joined into long conversations}, each thread carrying its time-anchored requests
    instead of the file's queries (the variants: benchmarks/time_requests.py); `path`: the
    threads' file (default: jmultiwoz_threads.jsonl)."""
    runs = dialogues(path or data_file("jmultiwoz_threads.jsonl"))
    spaced = [with_time_queries(t, runs[t.id]) for t in threads]
    close = [with_time_queries(close_up(t, runs[t.id]), runs[t.id]) for t in threads]
    long = [with_time_queries(join_up(t, r), r, PER_THREAD * n) for t, r, n in one_after_another(threads, runs)]
    return {"spaced": spaced, "close": close, "long": long}
