"""How benchmarks/peers.py scores every method alike (a module of that script, not a script):
semhist's token counter, the budget `semhist eval --budget` gives, and evaluate.py's tallies
per (method, budget), each query asked and timed at every budget."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from semhist.evaluate import _Tally
from semhist.kernel.model import Thread
from semhist.kernel.budget import Budget
from semhist.kernel.tokens import REPLY_PRIMING, count_message

from peers_report import BUDGETS, METHODS


def prompt_tokens(messages: list[dict[str, Any]]) -> int:
    return REPLY_PRIMING + sum(count_message(m) for m in messages)


def request_cost(request: str) -> int:
    return prompt_tokens([{"role": "user", "content": request}])


def budget_tokens(budget: str, history_tokens: int, request: str) -> int:
    """What semhist's Asker.limit gives (no system prompt, no system messages in the data)."""
    return Budget.parse(budget).tokens(request_cost(request) + history_tokens)


def timed(fn, *args, **kwargs) -> tuple[Any, float]:
    start = time.perf_counter()
    return fn(*args, **kwargs), (time.perf_counter() - start) * 1000


class Tallies:
    """evaluate.py's query tallies, write times and counters, per (method, budget)."""

    def __init__(self) -> None:
        self.q = {(m, b): _Tally() for m in METHODS[:-1] for b in BUDGETS}
        self.writes: dict[tuple[str, str | None], list[float]] = defaultdict(list)  # None: any budget
        self.extra: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def score(self, key: tuple[str, str], query, kept: set[int], tokens: int, full: int, ms: float, limit: int):
        t, relevant = self.q[key], set(query.relevant)
        t.recall.append(len(relevant & kept) / len(relevant))
        t.complete.append(relevant <= kept)
        t.tokens.append(tokens)
        t.ratio.append(tokens / full)
        t.ms.append(ms)
        t.over_budget += tokens > limit


def costs(thread: Thread) -> list[int]:
    return [count_message(m.to_openai()) for m in thread.messages]


def ask_all(thread: Thread, t: Tallies, methods: Sequence[str], ask, read, budgets: Sequence[str] = BUDGETS):
    """Every query at every budget: ask(request, limit) is timed, read(its answer, request)
    gives the history positions in the prompt and its tokens; scored for each of `methods`."""
    full = sum(costs(thread))
    for q in thread.queries:
        for b in budgets:
            limit = budget_tokens(b, full, q.text)
            answer, ms = timed(ask, q.text, limit)
            kept, tokens = read(answer, q.text)
            for method in methods:
                t.score((method, b), q, kept, tokens, request_cost(q.text) + full, ms, limit)
