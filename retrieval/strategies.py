"""History strategies: each decides what goes into the prompt, behind one interface.

Every strategy returns a Selection; `assemble.fit` turns it into messages within the
budget, so the boundary rules (system prompt intact, history starts on a user turn, tool
call and result together, last exchanges verbatim) hold for all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from indexers.errors import ConfigError
from indexers.index import HistoryIndex
from indexers.model import Thread
from indexers.settings import Settings

from .search import score_blocks, score_messages
from .select import Retrieved, Selection, last_units, top_blocks, turn_units


@dataclass(frozen=True)
class StrategyInput:
    thread: Thread
    units: tuple[tuple[int, ...], ...]
    settings: Settings
    index: HistoryIndex | None = None
    query_vector: np.ndarray | None = None


class Strategy(Protocol):
    name: str
    uses_search: bool

    def select(self, inp: StrategyInput) -> Selection: ...


class Full:
    """Every message (a budget then keeps the newest that fit)."""

    name, uses_search = "full", False

    def select(self, inp: StrategyInput) -> Selection:
        return Selection(history=inp.units)


class Window:
    """The last N messages, cut on a user turn."""

    name, uses_search = "window", False

    def select(self, inp: StrategyInput) -> Selection:
        return Selection(history=last_units(inp.thread.messages, inp.units, inp.settings.window))


class TokenBudget:
    """The newest messages that fit the token budget (`history_budget` when none is given)."""

    name, uses_search = "token-budget", False

    def select(self, inp: StrategyInput) -> Selection:
        return Selection(history=inp.units)


class Utterances:
    """Per-utterance semantic top-k plus the recent turns (the worked example's methods 2/3)."""

    name, uses_search = "utterances", True

    def select(self, inp: StrategyInput) -> Selection:
        recent = last_units(inp.thread.messages, inp.units, inp.settings.recent)
        kept = {p for u in recent for p in u}
        hits = [(p, s) for p, s in score_messages(inp.index, inp.query_vector, inp.settings.utterance_k + len(kept))
                if p not in kept][: inp.settings.utterance_k]
        return Selection(tuple(Retrieved((p,), s, rank) for rank, (p, s) in enumerate(hits)), recent)


class Blocks:
    """semhist's own: top-N time-gap blocks by keyword, chronological, plus the recent turns."""

    name, uses_search = "blocks", True

    def select(self, inp: StrategyInput) -> Selection:
        s = inp.settings
        recent = last_units(inp.thread.messages, inp.units, s.recent)
        kept = frozenset(p for u in recent for p in u)
        scored = score_blocks(inp.index, inp.query_vector, s.block_scoring)
        return Selection(tuple(top_blocks(scored, s.top_n, s.min_score, s.relative_score, kept)), recent)


STRATEGIES: dict[str, Callable[[], Strategy]] = {
    cls.name: cls for cls in (Full, Window, TokenBudget, Utterances, Blocks)
}


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]()
    except KeyError:
        raise ConfigError(f"unknown strategy {name!r}; valid: {', '.join(STRATEGIES)}") from None


def strategy_input(thread: Thread, settings: Settings, index: HistoryIndex | None = None,
                   query_vector: np.ndarray | None = None) -> StrategyInput:
    return StrategyInput(thread, tuple(turn_units(thread.messages)), settings, index, query_vector)
