"""Asks beyond the thread: a channel's reply chains are threads of their own (Teams), and a
request such as "what did we decide in this channel last month?" reaches the channel's other
threads, never another channel's or tenant's (the store's `neighbours`: same tenant, same
channel). 1:1 and group chats have no channel: their scope is the thread.

The work is bounded whatever the channel's size: the most recently written NEIGHBOURS threads
are searched (each through its own index, cached like any thread's), a few hits each; the
best EXCERPTS stretches go to the prompt, within their share of the budget
(pipeline/elsewhere.py).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from semhist.indexers.store import StoredMessage
from semhist.kernel.errors import InputError, SemhistError

from ..pipeline.elsewhere import Excerpt
from ..pipeline.keyword import KeywordResult
from ..pipeline.select import message_line

if TYPE_CHECKING:
    from .facade import History

log = logging.getLogger("semhist.history")

SCOPES = ("thread", "channel", "auto")
NEIGHBOURS = 16  # other threads of the channel searched, most recently written first
HITS = 3  # nearest messages taken from each
EXCERPTS = 4  # stretches kept, best first
STRETCH = 6  # messages of a stretch, around its hit
# "auto": the request names the channel, a #channel or other threads
_BEYOND = re.compile(r"\bchannels?\b|(?<![\w&#])#[^\s#]{2,}|\b(?:other|all|every|another|earlier) threads?\b"
                     r"|チャンネル|(?:他|ほか|別|全部)の(?:スレッド|スレ)", re.IGNORECASE)


def check_scope(scope: str) -> str:
    if scope not in SCOPES:
        raise InputError(f"unknown scope {scope!r}; valid: {', '.join(SCOPES)}", field="scope")
    return scope


def widened(scope: str, request: str) -> bool:
    """Whether the request reaches beyond its thread: always with "channel", with "auto" when
    it names the channel, a #channel or other threads."""
    return scope == "channel" or (scope == "auto" and _BEYOND.search(request) is not None)


def excerpts(history: History, thread_id: str, vector: np.ndarray, keywords: KeywordResult | None,
             readable: Callable[[str], bool] | None = None) -> tuple[Excerpt, ...]:
    """The best stretches of the channel's other threads for the request's query vector (in
    its time range, when it names one). `readable`: which threads the caller may read."""
    others = [t for t in history.store.neighbours(thread_id, NEIGHBOURS) if readable is None or readable(t)]
    return stretches(history, others, vector, keywords.time_range if keywords is not None else None)


def stretches(history: History, threads: list[str], vector: np.ndarray, span=None, hits: int = HITS,
              keep: int = EXCERPTS) -> tuple[Excerpt, ...]:
    """The `keep` best stretches of `threads` for a query vector: each thread's `hits` nearest
    messages (in `span`, a TimeRange, when given), one stretch per block, best first."""
    found: list[tuple[float, str, StoredMessage]] = []
    for other in threads:
        try:
            near = history.search(other, vector, hits)
        except SemhistError as exc:  # another embedder, forgotten meanwhile: not searchable with ours
            log.info("thread %s not searched: %s", other, exc)
            continue
        found += [(score, other, m) for m, score in near if span is None or span.contains(m.timestamp)]
    chosen: list[tuple[float, str, StoredMessage]] = []
    seen: set[tuple[str, int]] = set()
    for score, other, m in sorted(found, key=lambda h: -h[0]):
        where = (other, m.block_no if m.block_no is not None and m.block_no >= 0 else -1)  # -1: the open tail
        if where not in seen:
            seen.add(where)
            chosen.append((score, other, m))
        if len(chosen) == keep:
            break
    return tuple(_excerpt(history, other, m, score) for score, other, m in chosen)


def _excerpt(history: History, thread_id: str, hit: StoredMessage, score: float) -> Excerpt:
    """The hit with the messages around it in its block (or in the open tail), in order."""
    store = history.store
    if hit.block_no is not None and hit.block_no >= 0:
        ids = [i for b in store.blocks(thread_id, [hit.block_no]) for i in b.message_ids]
        around = store.messages(thread_id, ids=ids)
    else:
        around = store.tail(thread_id, with_vectors=False)
    at = next((i for i, m in enumerate(around) if m.id == hit.id), 0)
    first = max(0, min(at - STRETCH // 2, len(around) - STRETCH))
    stretch = [m for m in around[first:first + STRETCH] if m.role in ("user", "assistant") and m.content]
    start = next((m.timestamp for m in stretch if m.timestamp), hit.timestamp)
    return Excerpt(thread_id, start, tuple(message_line(m) for m in stretch), score)
