"""What `blocks` offers the packer, in rank order: per candidate its alternatives, largest
first (select.Candidate). A topic request's whole blocks, or parts of a block too big for what
is left; a fact question's windows around its best messages; the conversations of a named time.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from semhist.indexers.index.thread_index import ThreadIndex
from semhist.kernel.model import Thread
from semhist.kernel.settings import Settings

from .keyword import KeywordResult
from .mentions import Mentions, mentions_first
from .named_time import in_range
from .search import block_max
from .select import Candidate


def _window(index: ThreadIndex, row: int, width: int) -> tuple[int, ...]:
    """Positions of `row` and `width` neighbours each side, within the row's block; a window
    never ends on a question: the reply after it comes too, even from the next block."""
    first, end = index.block_rows
    b = index.row_block[row]
    lo, hi = max(first[b], row - width), min(end[b], row + width + 1)
    return tuple(index.rows[lo:_reply_end(index, hi - 1)])


REPLY_MESSAGES = 2  # a reply longer than this (tool calls and results) is left to its block


def _reply_end(index: ThreadIndex, row: int) -> int:
    """The row after the reply to the user message at `row` (`row + 1` for other messages):
    asked 「ラーメンのトッピングは？」, the best hit is often the earlier question
    「おすすめのトッピングは？」, and the answer is the message after it. (The next message after
    any question, whoever asked, was tried with the learned ranker: LoCoMo's tune half lost at
    1k and 4k tokens.)"""
    rows, messages = index.rows, index.messages
    end = row + 1
    if messages[rows[row]].role != "user":
        return end
    while (end < len(rows) and end - row <= REPLY_MESSAGES and rows[end] == rows[end - 1] + 1
           and messages[rows[end]].role not in ("user", "system")):
        end += 1
    return end


def time_candidates(thread: Thread, index: ThreadIndex, plan: KeywordResult, gap_seconds: float) -> list[Candidate]:
    """The conversations that started in the named time, to their end, before anything else
    (named_time.in_range); for a request that names nothing but the time, then the
    conversations around it: a search for no topic would find unrelated talk."""
    return in_range(thread.messages, index.blocks, plan.time_range, gap_seconds, around=not plan.keywords)


def topic_candidates(index: ThreadIndex, dense: np.ndarray, scores: np.ndarray, s: Settings,
           relative: bool, mentions: Mentions | None = None) -> list[Candidate]:
    """Whole blocks by their best message's score (`scores`: the ranker's, per row); a block
    too big for what is left offers, largest first, its topic sub-segment around that message,
    shorter stretches around it, and a window. With `mentions`, the blocks that mention the
    request's thing come first, or the stretch around each one's mentions when they do not
    fit (mentions.py)."""
    best = block_max(index, scores)
    best_dense = block_max(index, dense)
    first, end = index.block_rows
    floor = -np.inf
    if relative and len(best_dense):  # without a budget, a block far weaker than the best is another topic
        floor = best_dense.max() * s.relative_score
    if s.min_score is not None:
        floor = max(floor, s.min_score)
    out, ranked = [], []  # the candidates, and their blocks
    for b in np.argsort(-best, kind="stable"):
        if best_dense[b] < floor:
            continue
        row = int(first[b]) + int(np.argmax(scores[first[b]:end[b]]))
        out.append((_block_and_parts(index, b, row, s.hit_window), float(best_dense[b]), index.blocks[b].id,
                    index.rows[row]))
        ranked.append(int(b))
    return out if mentions is None else mentions_first(index, out, ranked, mentions)


def _block_and_parts(index: ThreadIndex, b: int, row: int, width: int) -> Iterator[tuple[int, ...]]:
    """Block `b` whole, then, largest first, its topic sub-segment around its best message at
    `row`, shorter stretches around that message and a window. Made as the packer reaches the
    block: most blocks of a thread it never reaches."""
    block = index.blocks[b]
    yield block.message_ids
    smaller = [block.part_of(row - int(index.block_rows[0][b])), _window(index, row, width),
               *_stretches(index, b, row)]
    smaller = [ids for ids in dict.fromkeys(smaller) if len(ids) < len(block.message_ids)]
    smaller.sort(key=len, reverse=True)  # stable: a topic sub-segment before a stretch as long
    yield from smaller


# Where a stretch around the best message starts: this share of it comes before the message.
# The talk about a thing mostly follows where it is first named (JMultiWOZ at 5%: 0.736 with
# none before, 0.744 with a fifth to a third, 0.725 centred).
LEAD = 0.25


def _stretches(index: ThreadIndex, b: int, row: int) -> list[tuple[int, ...]]:
    """Shorter and shorter stretches of block `b` around its best message at `row`, for a
    budget that cannot hold the block: the most of it that fits, not only one sub-segment."""
    first, end = index.block_rows
    lo, hi = int(first[b]), int(end[b])
    step = max(1, (hi - lo) // 16)  # at most 16 alternatives: each is priced when packed
    out = []
    for size in range(hi - lo - step, 2, -step):
        start = min(max(lo, row - round(size * LEAD)), hi - size)
        out.append(tuple(index.rows[start:start + size]))
    return out


def fact_candidates(index: ThreadIndex, dense: np.ndarray, scores: np.ndarray, width: int,
           limit: int = 400) -> Iterator[Candidate]:
    """Windows around the best messages by the ranker's `scores` (per row)."""
    rows = np.argsort(-scores, kind="stable")[:limit]
    # made as the packer reads them: a budget stops it after a few dozen of the 400
    blocks = index.blocks  # named by their number in the store (a view holds a few of them)
    return ((_fact(index, int(r), width), float(dense[r]), blocks[int(index.row_block[r])].id, index.rows[r])
            for r in rows)


def _fact(index: ThreadIndex, row: int, width: int) -> Iterator[tuple[int, ...]]:
    """A hit's window, then the hit and its reply, then the hit alone (each once)."""
    yield from dict.fromkeys((_window(index, row, width), tuple(index.rows[row:_reply_end(index, row)]),
                              (index.rows[row],)))
