"""A topic request's thing where a long thread names it.

"What did we say about 京都観光バス株式会社" asks for the talk that names the thing, and on a
long thread its words one by one are everywhere (京都, バス): a block that holds one of them
outranks, by dense and BM25 fused, one that names the thing. Two levers for a thread past
`view_limit` (each a setting, each measured alone and together in benchmarks/horizon.md; on a
thread that fits whole they cost JMultiWOZ's threads alone 0.993 -> 0.980 at 25%, so they stay
off there):

- `term_cover`: blocks that hold the most of the request's distinct words rank first;
- `mentions_first`: under a budget it fills, the stretch around each block's mention of the
  thing is packed before any block whole, so every stretch about it gets its core before one
  long dialogue takes the room with what it said about everything else.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from semhist.indexers.index.thread_index import ThreadIndex

from .search import RRF_K

# A block holding the most of the request's words ranks as if one list put it first (as a
# block where a named person speaks does: search.AUTHOR_BONUS); more changed nothing (JMultiWOZ
# joined, entity requests: the same recall with three lists' worth).
COVER_BONUS = 1.0 / (RRF_K + 1)
# The stretch around a block's mentions: from this many messages before the first to this many
# after the last. Chosen on JMultiWOZ's first 36 threads (2 / 5 against 1 / 3, 2 / 9, 3 / 14).
MENTION_BEFORE, MENTION_AFTER = 2, 5

Candidate = tuple[Iterable[tuple[int, ...]], "float | None", "int | None", "int | None"]


def cover_boost(index: ThreadIndex, terms: Sequence[str]) -> np.ndarray | None:
    """Per block: COVER_BONUS where a block holds the most of the request's distinct words;
    None when that is fewer than two (one word ranks by BM25 already) or every block holds them."""
    distinct = set(terms)
    if len(distinct) < 2 or not len(index.blocks):
        return None
    held = index.block_lexical.coverage(distinct)
    top = int(held.max())
    if top < 2 or (held == top).all():
        return None
    return (held == top) * COVER_BONUS


def mentions_first(index: ThreadIndex, out: list[Candidate], blocks: Sequence[int], terms: Sequence[str],
                   room: int) -> list[Candidate]:
    """The topic candidates `out` (one per block of `blocks`, block numbers in rank order)
    with the blocks that mention the request's thing first: when they do not fit `room` whole,
    first the stretch around each one's mentions; when they do, themselves whole."""
    found = _mentions(index, blocks, terms)
    if not found:
        return out
    if sum(index.blocks[b].tokens for b in found) > room:
        stretches = [([tuple(index.rows[found[b][0]:found[b][1]])], score, index.blocks[b].id, index.rows[found[b][2]])
                     for b, (_, score, _, _) in zip(blocks, out) if b in found]
        return stretches + out
    return [c for b, c in zip(blocks, out) if b in found] + [c for b, c in zip(blocks, out) if b not in found]


def _mentions(index: ThreadIndex, blocks: Sequence[int], terms: Sequence[str]) -> dict[int, tuple[int, int, int]]:
    """Per block of `blocks` that has one, the stretch (first row, end row, mention row) around
    its messages holding the most of the request's words any message holds: from
    MENTION_BEFORE messages before the first to MENTION_AFTER after the last."""
    held = index.lexical.coverage(set(terms)) if terms else np.zeros(0, dtype=np.int32)
    if not len(held) or not held.max():
        return {}
    top = held.max()
    first, end = index.block_rows
    named = np.maximum.reduceat(held, first) == top if len(first) else np.zeros(0, dtype=bool)
    found = {}
    for b in (b for b in blocks if named[b]):  # a few of the thread's blocks
        lo, hi = int(first[b]), int(end[b])
        hits = np.flatnonzero(held[lo:hi] == top)
        if len(hits):
            found[b] = (max(lo, lo + int(hits[0]) - MENTION_BEFORE), min(hi, lo + int(hits[-1]) + 1 + MENTION_AFTER),
                        lo + int(hits[0]))
    return found
