"""The cache layout's recent turns: where they start, what earlier prompts' retrieval they
carry, and how much new retrieval a turn may add (a token or a billed budget).

Between restarts a prompt only grows at its end, so a provider's prompt cache holds all of it
but the new exchange and the new retrieval; a restart comes when the turns and what they carry
outgrow the budget, and starts again from the recent turns.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import TYPE_CHECKING

from semhist.kernel.model import Thread

from ..billing import price_model
from .assemble import context_overhead, fixed_cost
from .select import PROTECTED_UNITS, Earlier, last_units, protected_count, shown_cost

if TYPE_CHECKING:
    from .strategies import StrategyInput

# The cache layout. Retrieved history new to a prompt is billed in full, what it carries over
# at the cached price: with a token budget, a new retrieval takes at most this share of it...
FRESH_SHARE = 0.25
# ...and with a billed budget, the turns and what they carry may grow until their cached
# price takes this share of it (then they start again from the recent turns).
CARRIED_BILLED_SHARE = 0.5
MIN_FRESH_SHARE = 0.3  # a turn that starts again has spent the budget on its turns; it still retrieves


def cached_part(inp: StrategyInput) -> tuple[tuple[tuple[int, ...], ...], tuple[Earlier, ...], float, bool]:
    """The cache layout's turns and the contexts they carry, the room for new retrieval, and
    whether the turns started again.
    A prompt that starts its turns again is new from the system prompt on (it pays in full
    either way), so its retrieval may take whatever room is left."""
    s, thread = inp.settings, inp.thread
    fixed = fixed_cost(thread, inp.request, s.system_prompt, inp.closing)
    recent, earlier, restarted = region_of(inp, turns_cap(inp, fixed))
    if inp.billed is None:
        return recent, earlier, float("inf") if restarted else FRESH_SHARE * inp.budget_tokens, restarted
    # billed this turn: what the last prompt held at the cached price, the rest in full
    cached = price_model(s.price_model).cached
    turns = sum(shown_cost(thread.messages, u) for u in recent) + sum(e.tokens for e in earlier)
    new = turns if restarted else sum(shown_cost(thread.messages, u) for u in recent[-PROTECTED_UNITS:])
    held = fixed + turns - new
    # a turn that starts again has spent the budget on its turns; it still retrieves something
    return recent, earlier, max(inp.billed - cached * held - new, MIN_FRESH_SHARE * inp.billed), restarted


def turns_cap(inp: StrategyInput, fixed: int) -> float:
    """What the cache layout's turns and the contexts they carry may cost before they start
    again: the budget less a new retrieval's share (a token budget), or what keeps their
    cached price within a share of a billed budget."""
    room = inp.budget_tokens - fixed - context_overhead()
    if inp.billed is None:
        return room - FRESH_SHARE * inp.budget_tokens
    return min(CARRIED_BILLED_SHARE * inp.billed / price_model(inp.settings.price_model).cached, room)


def region_of(inp: StrategyInput, cap: float) -> tuple[tuple[tuple[int, ...], ...], tuple[Earlier, ...], bool]:
    """The cache layout's recent turns, with the retrieved history earlier turns carried among
    them, and whether they started again: from where the previous prompt's turns started
    while they (and what they carry) cost at most `cap`, else again from the last `recent`
    messages (or as many more as a provider needs before it caches anything). A thread that
    fits `cap` whole is sent whole: nothing is left to retrieve. Between restarts a prompt
    only grows at its end, and the provider's cache holds all but the end."""
    s, thread = inp.settings, inp.thread
    # a long thread's view: its turns are its unbroken end, not the blocks chosen before it
    units = [u for u in inp.units if u[0] >= inp.index.tail_from]
    keep = protected_count(thread.messages, units, inp.request)
    if inp.index.whole and units and _costs_at_most(thread, units, (), cap):  # the whole thread fits: it only grows
        return tuple(units), (), inp.start != units[0][0]
    restart = _restart(thread, units, s.recent, min(price_model(s.price_model).minimum, cap / 2))
    start, restarted = restart, True
    if inp.start is not None:
        j = bisect_left(units, inp.start, key=lambda u: u[0])
        if j < len(units) and units[j][0] == inp.start and _costs_at_most(thread, units[j:], inp.earlier, cap):
            start, restarted = j, False
    start = min(start, max(len(units) - keep, 0))
    region = tuple(units[start:])
    first = region[0][0] if region else len(thread.messages)
    return region, () if restarted else tuple(e for e in inp.earlier if e.before >= first), restarted


def _restart(thread: Thread, units: Sequence[tuple[int, ...]], recent: int, tokens: float) -> int:
    """Where the turns start again: the last `recent` messages, and older turns while they
    cost under `tokens` together (OpenAI caches nothing shorter than 1,024 tokens)."""
    start = len(units) - len(last_units(thread.messages, units, recent))
    cost = sum(shown_cost(thread.messages, u) for u in units[start:])
    while start > 0 and cost < tokens:
        start -= 1
        cost += shown_cost(thread.messages, units[start])
    return start


def _costs_at_most(thread: Thread, units: Sequence[tuple[int, ...]], earlier: Sequence[Earlier], cap: float) -> bool:
    """Whether these turns and the earlier contexts among them cost at most `cap` (counting
    stops at the cap: a long stretch is not walked to its end)."""
    first = units[0][0]
    total = sum(e.tokens for e in earlier if e.before >= first)
    for unit in reversed(units):
        total += shown_cost(thread.messages, unit)
        if total > cap:
            return False
    return True
