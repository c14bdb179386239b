"""Query time: what a request that names a time takes first ("8月6日の23時台に話した内容",
"what did we talk about on May 8 at 9 pm", "先週の火曜日").

It means the conversations that *started* in that time, to their end: not every message
stamped 23:xx, not the whole day. A conversation ends at a pause longer than the
segmentation gap (`gap_seconds`); a block closed because it outgrew `max_block_tokens` (or
its topic drifted) carries the same conversation on. With room left, the conversations
around the time come before what a search for no topic would find.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from semhist.kernel.model import Block, Message

from .timerange import TimeRange

if TYPE_CHECKING:
    from .select import Candidate

STEPS = 32  # shorter alternatives of a stretch, at most: each is priced when packed


@dataclass(frozen=True)
class Conversation:
    """Consecutive blocks without a pause between them."""

    blocks: tuple[Block, ...]

    @cached_property
    def ids(self) -> tuple[int, ...]:
        return tuple(p for b in self.blocks for p in b.message_ids)

    @cached_property
    def starts(self) -> tuple[int, ...]:
        """Where talk starts in it (offsets into `ids`): each block and topic sub-segment."""
        ends = (0, *self.ends)
        return tuple(offset + k for b, offset in zip(self.blocks, ends) for k in b.parts)

    @cached_property
    def ends(self) -> tuple[int, ...]:
        """Where each of its blocks ends (offsets into `ids`, exclusive)."""
        return tuple(accumulate(len(b.message_ids) for b in self.blocks))


def conversations(messages: Sequence[Message], blocks: Sequence[Block], gap_seconds: float) -> list[Conversation]:
    groups: list[list[Block]] = []
    for block in blocks:
        if groups and _no_pause(messages, groups[-1][-1], block, gap_seconds):
            groups[-1].append(block)
        else:
            groups.append([block])
    return [Conversation(tuple(g)) for g in groups]


def _no_pause(messages: Sequence[Message], before: Block, block: Block, gap_seconds: float) -> bool:
    end, start = messages[before.last].timestamp, messages[block.first].timestamp
    return end is not None and start is not None and (start - end).total_seconds() <= gap_seconds


@dataclass(frozen=True)
class _Touched:
    """One conversation with messages in the named time: `own` is where the talk that began
    in it starts (None when none began in it) and `first`/`last` the offsets of its first and
    last message in the time."""

    conversation: Conversation
    first: int
    last: int
    own: int | None


def _touched(messages: Sequence[Message], conv: Conversation, span: TimeRange) -> _Touched | None:
    began, ended = messages[conv.blocks[0].first].timestamp, messages[conv.blocks[-1].last].timestamp
    if began is not None and ended is not None and (ended < span.start or began >= span.end):
        return None  # most of a thread: not read message by message
    ids, when = conv.ids, span.contains
    inside = [k for k, p in enumerate(ids) if when(messages[p].timestamp)]
    if not inside:
        return None
    began = next((messages[p].timestamp for p in ids if messages[p].timestamp), None)
    # a conversation that began earlier: the talk of the time starts where a block or topic
    # sub-segment starts in it ("21時台" is not the end of a talk that began at 20:58)
    own = 0 if when(began) else next((k for k in conv.starts if k >= inside[0] and when(messages[ids[k]].timestamp)),
                                     None)
    return _Touched(conv, inside[0], inside[-1], own)


def in_range(messages: Sequence[Message], blocks: Sequence[Block], span: TimeRange, gap_seconds: float,
             around: bool = True) -> list[Candidate]:
    """The candidates of the named time, before anything the search finds, in this order:

    1. the talk that began in it, oldest first: each conversation that started in it, and in
       one that began earlier, from the first block or topic sub-segment starting in it; up to
       the end of the time;
    2. the last of them carried on past the time to its end;
    3. (`around`, for a day or an hour) the time's surroundings: the conversation just
       before it (or the part before the time of one that ran into it), then the one just
       after.

    One candidate per conversation and step: without a budget, `top_n` counts them. A day or
    an hour names the conversations wanted, so a stretch too big for what is left offers its
    longest start that fits (its longest end, before the time); a month or a year only
    narrows a search, and a stretch of it offers only its starts that end with a block.
    """
    one_day = span.end - span.start <= timedelta(days=1)
    convs = conversations(messages, blocks, gap_seconds)
    touched = [(n, t) for n, c in enumerate(convs) if (t := _touched(messages, c, span)) is not None]
    talk = [_from_start(t.conversation, t.own, t.last + 1, one_day) for _, t in touched if t.own is not None]
    # only the last conversation can go on past the time: each one before it ended before the next began
    carried = [_from_start(t.conversation, t.last + 1, len(t.conversation.ids), one_day)
               for _, t in touched[-1:] if t.own is not None]
    out = [c for c in talk + carried if c is not None]
    if around and one_day:
        out += [c for c in _surroundings(messages, convs, touched, span) if c is not None]
    return out


def _surroundings(messages: Sequence[Message], convs: list[Conversation], touched: list[tuple[int, _Touched]],
                  span: TimeRange) -> list[Candidate | None]:
    """The conversation just before the named time (the part before the talk of the time, of
    one that ran into it) and the one just after."""
    if touched:
        n, first = touched[0]
        if first.own != 0:
            before = _from_end(first.conversation, 0, first.own if first.own is not None else first.last + 1)
        else:
            before = _from_end(convs[n - 1], 0, len(convs[n - 1].ids)) if n else None
        later_at = touched[-1][0] + 1
    else:  # nothing was said then: the talk around it
        later_at = next((n for n, c in enumerate(convs) if _began(messages, c, span.start)), len(convs))
        before = _from_end(convs[later_at - 1], 0, len(convs[later_at - 1].ids)) if later_at else None
    after = _from_start(convs[later_at], 0, len(convs[later_at].ids), True) if later_at < len(convs) else None
    return [before, after]


def _began(messages: Sequence[Message], conv: Conversation, moment: datetime) -> bool:
    began = next((messages[p].timestamp for p in conv.ids if messages[p].timestamp), None)
    return began is not None and began >= moment


def _cuts(conv: Conversation, lo: int, hi: int, fine: bool) -> list[int]:
    """Where a shorter stretch of ids[lo:hi] may end, the latest first: at its blocks' ends,
    and (`fine`) every STEPS-th of it."""
    cuts = {k for k in conv.ends if lo < k < hi}
    if fine:
        step = max(1, (hi - lo) // STEPS)
        cuts.update(range(lo + 2, hi, step))
    return sorted(cuts, reverse=True)


def _from_start(conv: Conversation, lo: int, hi: int, fine: bool) -> Candidate | None:
    """ids[lo:hi] whole, or its longest start that fits: oldest first."""
    if hi <= lo:
        return None
    ids = conv.ids
    alternatives = (ids[lo:hi], *(ids[lo:k] for k in _cuts(conv, lo, hi, fine)))
    return alternatives, None, _block_at(conv, lo), None


def _from_end(conv: Conversation, lo: int, hi: int) -> Candidate | None:
    """ids[lo:hi] whole, or its longest end that fits: nearest the named time first."""
    if hi <= lo:
        return None
    ids = conv.ids
    starts = sorted({k for k in conv.ends if lo < k < hi} | set(range(lo + 1, hi - 1, max(1, (hi - lo) // STEPS))))
    return (ids[lo:hi], *(ids[k:hi] for k in starts)), None, _block_at(conv, hi - 1), None


def _block_at(conv: Conversation, offset: int) -> int:
    for b, end in zip(conv.blocks, conv.ends):
        if offset < end:
            return b.id
    return conv.blocks[-1].id
