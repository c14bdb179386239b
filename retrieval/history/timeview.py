"""The blocks a candidate view needs for a request that names a time (a thread longer than
`view_limit`): those of the time's own messages, those that carry their conversations on to a
pause, and the conversations just before and after. What pipeline.named_time chooses from.

The time's messages alone (store.in_time) cut every conversation at the end of the hour:
"what did we talk about at 19:00" lost the talk from 20:00 on (the long variant of
benchmarks/time_requests.py, threads of 5,400-7,700 messages: 0.961 / 0.596 of the gold at
every budget, 1.000 / 1.000 with these blocks).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta, timezone

from semhist.indexers.store import StoreReader, StoredBlock, StoredMessage

from ..pipeline.timerange import EARLIEST_CLOCK, LATEST_CLOCK, TimeRange

PROBED = 64  # messages read to find the clock of a named day's talk


def on_their_clocks(store: StoreReader, thread_id: str, span: TimeRange) -> TimeRange:
    """A named date on the clocks of the people who talked then: "what did we say on 23 August"
    means the day the messages of that time were written on, in their own zone, which is not
    always the asker's (a request's days are read in the zone of the thread's last message). The
    zone is that of the first message, of the first `PROBED` that any clock could put on that
    date, written on it by its own clock; with none, the asker's. A day counted back from the
    last message ("yesterday") stays on the asker's clock."""
    if span.relative:
        return span
    wall = span.start.replace(tzinfo=None)
    found = store.in_time(thread_id, (wall.replace(tzinfo=timezone.utc) - EARLIEST_CLOCK).timestamp(),
                          (span.end.replace(tzinfo=timezone.utc) + LATEST_CLOCK).timestamp(), PROBED)
    for m in found:
        zone = m.timestamp.tzinfo if m.timestamp is not None else None
        if zone is not None and span.in_zone(zone).contains(m.timestamp):
            return span.in_zone(zone)
    return span


CARRIED_BLOCKS = 32  # blocks read after the time's own to find where its conversations end
AROUND_BLOCKS = 8  # blocks of the conversation just before it and of the one just after


def conversation_blocks(store: StoreReader, thread_id: str, span: TimeRange, timed: Sequence[StoredMessage],
                        gap_seconds: float | None) -> list[int]:
    """Block numbers, in order: the closed blocks of `timed` (the messages of the time `span`)
    and, for a day or an hour, the blocks after them up to the end of the last one's
    conversation (a pause longer than `gap_seconds`) and of the next conversation, and the
    conversation before them (a month only narrows a search: pipeline.named_time)."""
    own = sorted({m.block_no for m in timed if m.block_no is not None and m.block_no >= 0})
    if not own or gap_seconds is None or span.end - span.start > timedelta(days=1):
        return own
    lo, hi = own[0], own[-1]
    near = store.blocks(thread_id, list(range(max(0, lo - AROUND_BLOCKS), hi + CARRIED_BLOCKS + AROUND_BLOCKS + 1)))
    by_no = {b.block_no: b for b in near}
    times = {m.id: m.timestamp for m in store.messages(
        thread_id, ids=[i for b in near for i in (b.message_ids[0], b.message_ids[-1])])}

    def pause(before: StoredBlock, after: StoredBlock) -> bool:
        end, start = times.get(before.message_ids[-1]), times.get(after.message_ids[0])
        return end is None or start is None or (start - end).total_seconds() > gap_seconds

    later = _chain(by_no, hi, 1, CARRIED_BLOCKS, pause)
    later += _chain(by_no, later[-1] if later else hi, 1, AROUND_BLOCKS, pause, across=True)
    earlier = _chain(by_no, lo, -1, AROUND_BLOCKS, pause, across=True)
    return sorted({*earlier, *range(lo, hi + 1), *later} & ({*by_no} | set(own)))


def _chain(by_no: dict[int, StoredBlock], start: int, step: int, limit: int, pause, across: bool = False) -> list[int]:
    """The blocks next to `start` (`step` 1: later, -1: earlier; `start` itself not included)
    without a pause between them, at most `limit`. `across`: a pause right next to `start`
    is crossed (the neighbouring conversation is wanted), the next one ends the chain."""
    out: list[int] = []
    current = by_no.get(start)
    while current is not None and len(out) < limit:
        nxt = by_no.get(current.block_no + step)
        if nxt is None or (pause(*((current, nxt) if step > 0 else (nxt, current))) and not (across and not out)):
            break
        out.append(nxt.block_no)
        current = nxt
    return out
