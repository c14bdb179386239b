"""The long threads of benchmarks/horizon.py, built from the benchmark files alone (a part of
horizon.py: `python benchmarks/horizon.py --write-data DIR` writes them as JSON Lines; the
Japanese one, `--sets jmultiwoz`, from the copy the repository ships in data/benchmarks/).

- **LoCoMo merged**: the ten conversations' sessions in one thread by their own dates. A session
  is kept whole; one that would start before the previous one ends starts 30 s after it (a few
  minutes' shift at most, so "what did we say on 8 May" still points at 8 May). Each question
  keeps its evidence, moved to the merged positions.
- **JMultiWOZ joined** (Japanese): the 71 threads' dialogues in one thread by their own
  timestamps, each dialogue whole, the same 30 s rule. Requests about a named thing are asked
  of the whole thread, so their gold is every stretch of the whole thread about it, defined
  from the data's own annotations:
  - an entity request ("Xについて前に話した内容をまとめてください"): every topic segment
    (`topic_segments`, the dataset's own domain spans of a dialogue) in which some message
    names X verbatim;
  - a city-and-domain request ("横浜のショッピング施設について相談した内容をまとめて"): its own
    thread's gold, and every topic segment labelled with that domain whose dialogue names the
    city.
- **Mixed**: both in one thread by their dates (LoCoMo's 2022-23 months, then JMultiWOZ's
  2024 ones), over 1M tokens: an English conversation of a Japanese company's Teams thread,
  buried under months of Japanese talk.

Messages keep their speakers' names (`speaker`, Teams' `from.name`); the dataset's annotations
(`session`, `dialogue_id`, `domain`, `topic_segments`) are used here for the gold only, never
passed to retrieval.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

GAP = timedelta(seconds=30)  # between two stretches that would overlap
ANNOTATIONS = ("session", "dialogue_id", "domain", "dia_id", "image_caption")


def _read(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _stretches(threads: list[dict], key: str) -> list[tuple[int, list[int]]]:
    """(thread number, message positions) of each session or dialogue, in order of its start."""
    out = []
    for n, t in enumerate(threads):
        current, last = [], None
        for i, m in enumerate(t["messages"]):
            if current and m.get(key) != last:
                out.append((n, current))
                current = []
            current.append(i)
            last = m.get(key)
        if current:
            out.append((n, current))
    return sorted(out, key=lambda s: (_when(threads[s[0]]["messages"][s[1][0]]), s[0], s[1][0]))


def _when(m: dict) -> datetime:
    """A message's time; a naive one (LoCoMo's) is UTC, as `semhist` reads it by default."""
    ts = datetime.fromisoformat(m["timestamp"])
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


def merged(threads: list[dict], key: str, thread_id: str) -> tuple[dict, dict[tuple[int, int], int]]:
    """One thread of every stretch (`key`: session or dialogue_id) by its own dates, each kept
    whole; and where each (thread number, position) went."""
    messages, where, end = [], {}, None
    for n, positions in _stretches(threads, key):
        first = _when(threads[n]["messages"][positions[0]])
        shift = (end + GAP - first) if end is not None and first < end + GAP else timedelta(0)
        for p in positions:
            m = dict(threads[n]["messages"][p])
            moved = _when(m) + shift
            m["timestamp"] = moved.isoformat()
            where[(n, p)] = len(messages)
            messages.append(m)
            end = moved
    return {"id": thread_id, "language": threads[0].get("language"), "messages": messages, "queries": []}, where


def locomo_merged(path: Path) -> dict:
    threads = _read(path)
    thread, where = merged(threads, "session", "locomo-merged")
    for n, t in enumerate(threads):
        for q in t["queries"]:
            thread["queries"].append({**q, "relevant_message_indices": sorted(where[(n, i)] for i in
                                                                               q["relevant_message_indices"]),
                                      "conversation": t["id"]})
    return thread


def _segments(t: dict) -> list[tuple[int, int, str]]:
    return [(int(s), int(e), str(label)) for s, e, label in t.get("topic_segments", [])]


def jmultiwoz_joined(path: Path) -> dict:
    threads = _read(path)
    thread, where = merged(threads, "dialogue_id", "jmultiwoz-joined")
    # every topic segment of every thread, as merged positions, with its dialogue's text
    segments = []
    for n, t in enumerate(threads):
        dialogue_text: dict[str, str] = {}
        for m in t["messages"]:
            dialogue_text[m["dialogue_id"]] = dialogue_text.get(m["dialogue_id"], "") + m["content"]
        for s, e, label in _segments(t):
            text = "".join(t["messages"][i]["content"] for i in range(s, e))
            segments.append({"positions": [where[(n, i)] for i in range(s, e)], "label": label, "text": text,
                             "dialogue": dialogue_text[t["messages"][s]["dialogue_id"]]})
    for n, t in enumerate(threads):
        for q in t["queries"]:
            own = {where[(n, i)] for i in q["relevant_message_indices"]}
            if q.get("category") == "entity_recall":
                gold = {p for seg in segments if q["entity"] in seg["text"] for p in seg["positions"]}
            else:  # domain_city_recall
                gold = own | {p for seg in segments if seg["label"] == q["domain"] and q["city"] in seg["dialogue"]
                              for p in seg["positions"]}
            stretches = sum(1 for seg in segments if set(seg["positions"]) & gold)
            thread["queries"].append({**q, "relevant_message_indices": sorted(gold | own),
                                      "stretches": stretches, "thread": t["id"]})
    return thread


def mixed(english: dict, japanese: dict) -> dict:
    """Both threads in one by their dates (each already merged: its stretches keep their order)."""
    threads = [english, japanese]
    for t, key in ((english, "session"), (japanese, "dialogue_id")):
        for m in t["messages"]:
            m.setdefault("_stretch", f"{t['id']}:{m.get(key)}")
    thread, where = merged(threads, "_stretch", "mixed")
    for n, t in enumerate(threads):
        for q in t["queries"]:
            thread["queries"].append({**q, "relevant_message_indices": [where[(n, i)] for i in
                                                                        q["relevant_message_indices"]],
                                      "part": t["id"]})
    for m in thread["messages"]:
        m.pop("_stretch", None)
    for t in threads:
        for m in t["messages"]:
            m.pop("_stretch", None)
    return thread


def stripped(thread: dict) -> dict:
    """The thread as retrieval may see it: annotations left out of the messages."""
    return {**thread, "messages": [{k: v for k, v in m.items() if k not in ANNOTATIONS} for m in thread["messages"]]}
