"""A topic request's thing where a long thread names it.

"What did we say about 京都観光バス株式会社" asks for the talk that names the thing, and on a
long thread its words one by one are everywhere (京都, バス): a block that holds one of them
outranks, by dense and BM25 fused, one that names the thing. Which blocks hold the most of its
distinct words (`cover_blocks`) is one of the learned ranker's features (ranker.py; it replaced
a fixed bonus, `term_cover`). Two packing levers for a thread past `view_limit` (each a setting,
measured in benchmarks/horizon*.md; on a thread that fits whole they cost JMultiWOZ's threads
alone 0.993 -> 0.980 at 25%, so they stay off there):

- `mentions_first`: under a budget it fills, the stretch around each block's mention of the
  thing is packed before any block whole, so every stretch about it gets its core before one
  long dialogue takes the room with what it said about everything else;
- `mentions_run_on`: next, the talk after each such block's last mention goes on past the
  block's end, where the block was cut for its size rather than by a pause (a view holds the
  block after each of its best full-text blocks when the request has a budget it fills:
  history/views.py), further when every mention block fits whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from semhist.indexers.index.thread_index import ThreadIndex

from .select import Candidate

# The stretch around a block's mentions: from this many messages before the first to this many
# after the last. Chosen on JMultiWOZ's first 36 threads (2 / 5 against 1 / 3, 2 / 9, 3 / 14).
MENTION_BEFORE, MENTION_AFTER = 2, 5
# How far the talk after a block's last mention runs on into the next block when every mention
# block fits whole (MENTION_AFTER where the room does not hold that): the room left would go to
# blocks that never name the thing. Chosen on JMultiWOZ's first 36 threads (10 against 5, 8, 20:
# docs/guides/strategies.md, "The thing a request names").
RUN_ON_FITS = 10

def cover_blocks(index: ThreadIndex, terms: Sequence[str]) -> np.ndarray | None:
    """Per block: whether it holds the most of the request's distinct words; None when that is
    fewer than two (one word ranks by BM25 already) or every block holds them."""
    distinct = set(terms)
    if len(distinct) < 2 or not len(index.blocks):
        return None
    held = index.block_lexical.coverage(distinct)
    top = int(held.max())
    if top < 2 or (held == top).all():
        return None
    return held == top


def mention_rows(index: ThreadIndex, terms: Sequence[str]) -> np.ndarray | None:
    """The rows that mention the request's thing: those holding the most of its distinct words
    any row holds, two or more when it has two (one common word of a name is no mention of it);
    None when there are none."""
    distinct = set(terms)
    held = index.lexical.coverage(distinct) if distinct else np.zeros(0, dtype=np.int32)
    if not len(held) or held.max() < min(2, len(distinct)):
        return None
    return held == held.max()


@dataclass(frozen=True, eq=False)  # an array field: compared by identity
class Mentions:
    """What mentions_first needs of a request: the rows that mention its thing (mention_rows),
    the room the packer gets, and, when the talk may run on past a block's end, the pause
    (seconds) that ends a conversation (None: it stops at the block's end)."""

    rows: np.ndarray
    room: int
    run_on: float | None = None


def mentions_first(index: ThreadIndex, out: list[Candidate], blocks: Sequence[int], m: Mentions) -> list[Candidate]:
    """The topic candidates `out` (one per block of `blocks`, block numbers in rank order)
    with the blocks that mention the request's thing first: when they do not fit the room
    whole, first the stretch around each one's mentions (or, when that does not fit, around its
    first); when they do, themselves whole. Then (`run_on`) the talk after each one's last
    mention, on into the next block where the block ends before it does: MENTION_AFTER
    messages on, and when the blocks fit whole then on to RUN_ON_FITS."""
    found = _stretches(index, blocks, m.rows)
    if not found:
        return out
    fits = sum(index.blocks[b].tokens for b in found) <= m.room
    on = [] if m.run_on is None else _run_on(index, [(b, score) for b, (_, score, _, _) in zip(blocks, out)
                                                     if b in found], m.rows, m.run_on,
                                             (MENTION_AFTER, RUN_ON_FITS) if fits else (MENTION_AFTER,))
    if not fits:
        return [(found[b][0], score, index.blocks[b].id, found[b][1]) for b, (_, score, _, _) in zip(blocks, out)
                if b in found] + on + out
    return [c for b, c in zip(blocks, out) if b in found] + on + [c for b, c in zip(blocks, out) if b not in found]


def _run_on(index: ThreadIndex, found: Sequence[tuple[int, float]], mentioned: np.ndarray,
            pause: float, reach: Sequence[int] = (MENTION_AFTER,)) -> list[Candidate]:
    """Per block of `found` (block, score) whose last mention is within `n` messages of its end,
    for each `n` of `reach` in turn: the messages after its end up to `n` after that mention, as
    far as the view holds them unbroken and no pause longer than `pause` seconds parts them.
    Every block's shorter run comes before any block's longer one (it costs only what is new)."""
    first, end = index.block_rows
    walked = []  # per block: its end, how far the talk runs on, its last mention, its score
    for b, score in found:
        lo, hi = int(first[b]), int(end[b])
        last = lo + int(np.flatnonzero(mentioned[lo:hi])[-1])
        stop, z = min(len(index.rows), last + 1 + max(reach)), hi
        while z < stop and _follows(index, z, pause):
            z += 1
        walked.append((hi, z, last, score))
    # the next block's messages, none of them a hit (a tool result stays as shown)
    return [([tuple(index.rows[hi:e])], score, index.blocks[int(index.row_block[hi])].id, None)
            for n in sorted(reach) for hi, z, last, score in walked if (e := min(z, last + 1 + n)) > hi]


def _follows(index: ThreadIndex, row: int, pause: float) -> bool:
    """Whether row `row` continues the talk of the row before it: the thread holds nothing
    between them that the view lacks, and no pause longer than `pause` seconds parts them."""
    before, at = index.rows[row - 1], index.rows[row]
    # a row before its predecessor is the open block's late message stamped long ago
    if at <= before or any(p in index.gaps for p in range(before + 1, at + 1)):
        return False
    t0, t1 = index.messages[before].timestamp, index.messages[at].timestamp
    return t0 is None or t1 is None or (t1 - t0).total_seconds() <= pause


def _stretches(index: ThreadIndex, blocks: Sequence[int],
               mentioned: np.ndarray) -> dict[int, tuple[list[tuple[int, ...]], int]]:
    """Per block of `blocks` that mentions the thing, its alternatives, largest first (from
    MENTION_BEFORE messages before its first mention to MENTION_AFTER after its last, then the
    same around its first mention alone), and the position of its first mention."""
    first, end = index.block_rows
    some = np.maximum.reduceat(mentioned, first) if len(first) else np.zeros(0, dtype=bool)
    found = {}
    for b in (b for b in blocks if some[b]):  # a few of the thread's blocks
        lo, hi = int(first[b]), int(end[b])
        hits = lo + np.flatnonzero(mentioned[lo:hi])
        spans = [(max(lo, int(hits[0]) - MENTION_BEFORE), min(hi, int(hits[-1]) + 1 + MENTION_AFTER)),
                 (max(lo, int(hits[0]) - MENTION_BEFORE), min(hi, int(hits[0]) + 1 + MENTION_AFTER))]
        found[b] = [tuple(index.rows[a:z]) for a, z in dict.fromkeys(spans)], index.rows[int(hits[0])]
    return found
