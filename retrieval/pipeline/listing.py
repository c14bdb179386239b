"""What a prompt names when it cannot hold everything about a thing.

"Summarize what we said about X" on a thread of months: X came up in a dozen stretches, and
the budget holds three of them verbatim. The prompt still names every one of them: the best
verbatim, and for each stretch left out one dated line in its own words (the message that
names X, cut to a line; no LLM), so the model can say when X came up and the user can ask for
one. The lines sit at the end of the retrieved history, quoted like the rest. A request that names a
time is answered by that time's conversations, and lists nothing.

Which stretches are about X: the blocks that hold every term of the request (one may be
missing when it has four or more), by the store's lexical index — the words, not the meaning,
so a line is never a guess; words that a fifth of the thread's blocks hold name no thing (a
long thread's view counts them by the store's block frequencies for the whole thread: the view
was chosen for the request's words, and takes more blocks for a topic request's words so that
its stretches can be named). At most `MAX_LINES`, within a share of the budget (`LINE_SHARE`):
when a packing of the whole budget leaves stretches about X out, the verbatim stretches are
packed again in what the lines leave (a line costs a tenth of a stretch).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from semhist.indexers.index.thread_index import ThreadIndex
from semhist.kernel.model import Thread, message_text
from semhist.kernel.quoting import escaped, speaker
from semhist.kernel.tokens import count_text

MAX_LINES = 32
LINE_SHARE = 0.4  # of the room for retrieval, at most, when lines are wanted
LINE_CHARS = 48  # of the message's text, on its line (enough to tell the stretch; Japanese costs a token a character)
LISTED_HEADER = "[also about this, not shown above: one line each]"
GENERIC = 0.2  # terms held by more than this share of the blocks are no named thing


def about(index: ThreadIndex, terms: Sequence[str]) -> list[tuple[int, int]]:
    """(block number, its best row) of each block that holds the request's terms, in order."""
    wanted = list(dict.fromkeys(terms))
    if not wanted or not len(index.blocks):
        return []
    held = np.zeros(len(index.blocks), dtype=np.int32)
    for term in wanted:
        held += index.block_lexical.scores([term]) > 0
    need = len(wanted) - 1 if len(wanted) >= 4 else len(wanted)
    blocks = np.flatnonzero(held >= need)
    if not len(blocks) or generic(index, wanted, len(blocks), need):
        return []  # words that much of the thread holds name no thing
    blocks = blocks[:MAX_LINES * 4]
    rows = index.lexical.scores(wanted)
    first, end = index.block_rows
    return [(int(b), int(first[b]) + int(np.argmax(rows[first[b]:end[b]]))) for b in blocks]


def generic(index: ThreadIndex, terms: Sequence[str], holding: int, need: int) -> bool:
    """Whether more than `GENERIC` of the thread's blocks hold the request's words. A view holds
    a few blocks chosen for them: it asks the store how many of the thread's blocks hold each
    word, and about as many hold `need` of them as hold the `need`-th most common."""
    if index.whole or index.block_frequencies is None:
        return holding > GENERIC * len(index.blocks)
    df, blocks = index.block_frequencies
    counts = sorted(df.get(t, 0) for t in terms)
    return counts[-need] > GENERIC * blocks if len(counts) >= need else False


def reserve(index: ThreadIndex, found: Sequence[tuple[int, int]], shown: Collection[int], room: int) -> int:
    """Tokens the lines need for the stretches about X that a packing of all of `room` left out
    (at most `LINE_SHARE` of it): the verbatim stretches are packed again in what remains."""
    left = unshown(index, found, shown)
    if not left:
        return 0
    need = count_text(LISTED_HEADER) + 1 + sum(count_text(line(index.thread, p)) + 1 for p in left[:MAX_LINES])
    return min(need, int(LINE_SHARE * room))


def unshown(index: ThreadIndex, found: Sequence[tuple[int, int]], shown: Collection[int]) -> list[int]:
    """The best message of each block about X that the prompt does not show, in order."""
    return [index.rows[row] for b, row in found if not any(p in shown for p in index.blocks[b].message_ids)]


def listed(index: ThreadIndex, found: Sequence[tuple[int, int]], shown: Collection[int], room: int) -> tuple[int, ...]:
    """The best message of each block about X that the prompt does not show, chronological,
    as many as `room` tokens hold (the first ones in time when not all do)."""
    thread, out, spent = index.thread, [], count_text(LISTED_HEADER) + 1
    for p in unshown(index, found, shown):
        cost = count_text(line(thread, p)) + 1
        if spent + cost > room or len(out) >= MAX_LINES:
            break
        out.append(p)
        spent += cost
    return tuple(out)


def line(thread: Thread, p: int) -> str:
    """One dated line of a message: its author and the start of its text, quoted, one line."""
    m = thread.messages[p]
    text = " ".join(escaped(message_text(m)).split())
    text = text if len(text) <= LINE_CHARS else text[:LINE_CHARS - 1] + "…"
    when = f"[{m.timestamp:%Y-%m-%d %H:%M}] " if m.timestamp else "[...] "
    return f"{when}{speaker(m.name, m.role)}: {text}"


def render(thread: Thread, positions: Sequence[int]) -> list[str]:
    return [LISTED_HEADER, *(line(thread, p) for p in positions)] if positions else []
