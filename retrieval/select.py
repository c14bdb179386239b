"""Query time, stage 3: which messages go into the prompt.

History is cut in *turn units*: a user message with the assistant and tool messages that
follow it. Cutting only between units keeps the history starting on a user turn and never
separates a tool call from its result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from indexers.model import Message

PROTECTED_UNITS = 2  # the last two exchanges stay verbatim ("それ" needs them)


@dataclass(frozen=True)
class Retrieved:
    """A group of old messages placed in the context message; rank 0 is the best."""

    message_ids: tuple[int, ...]
    score: float
    rank: int
    block_id: int | None = None


@dataclass(frozen=True)
class Selection:
    """What a strategy keeps: retrieved groups (best first) and verbatim history units."""

    retrieved: tuple[Retrieved, ...] = ()
    history: tuple[tuple[int, ...], ...] = ()  # turn units, chronological

    @property
    def history_ids(self) -> tuple[int, ...]:
        return tuple(p for unit in self.history for p in unit)

    @property
    def included(self) -> frozenset[int]:
        return frozenset(self.history_ids) | {p for r in self.retrieved for p in r.message_ids}


def turn_units(messages: Sequence[Message]) -> list[tuple[int, ...]]:
    """Non-system messages grouped into units that each start on a user message.

    Messages before the first user message form a unit of their own; it can never open the
    kept history, so it is only ever kept when the whole history is.
    """
    units: list[list[int]] = []
    for pos, msg in enumerate(messages):
        if msg.role == "system":
            continue
        if msg.role == "user" or not units:
            units.append([pos])
        else:
            units[-1].append(pos)
    return [tuple(u) for u in units]


def last_units(messages: Sequence[Message], units: Sequence[tuple[int, ...]], max_messages: int,
               minimum_units: int = PROTECTED_UNITS) -> tuple[tuple[int, ...], ...]:
    """The newest units holding at most `max_messages` messages, but never fewer than
    `minimum_units` units (the last exchanges are always kept)."""
    kept: list[tuple[int, ...]] = []
    count = 0
    for unit in reversed(units):
        if len(kept) >= minimum_units and count + len(unit) > max_messages:
            break
        kept.append(unit)
        count += len(unit)
    kept.reverse()
    # A leading unit that does not start on a user turn (an assistant greeting) may only
    # stay when everything is kept.
    if kept and len(kept) < len(units) and messages[kept[0][0]].role != "user":
        kept = kept[1:]
    return tuple(kept)


def top_blocks(scored, top_n: int, min_score: float | None, relative_score: float,
               exclude: frozenset[int]) -> list[Retrieved]:
    """The best `top_n` blocks, minus messages already kept verbatim.

    A block is also left out when it scores below `min_score` (absolute, per embedder) or
    below `relative_score` times the best block's score: a block far weaker than the best
    is another topic, and a fixed top-N would otherwise always fill up with one.
    """
    out: list[Retrieved] = []
    floor = scored[0].score * relative_score if scored and scored[0].score > 0 else None
    for sb in scored:
        if len(out) >= top_n or (min_score is not None and sb.score < min_score):
            break
        if floor is not None and sb.score < floor:
            break
        ids = tuple(p for p in sb.block.message_ids if p not in exclude)
        if ids:
            out.append(Retrieved(ids, sb.score, len(out), sb.block.id))
    return out
