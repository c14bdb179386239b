"""semhist: semantic history retrieval for never-ending chat threads.

A bot appends the user's message, asks for the next turn's prompt, appends its reply:

>>> import semhist
>>> history = semhist.History(semhist.Settings.load(db="sqlite:///bot.sqlite3"))
>>> history.add("thread-1", "user", "the budget is 5,000", key="activity-1")
1
>>> result = history.ask("thread-1", "what was the budget?", budget=semhist.Budget.parse("2000"))
>>> result.prompt.messages[-1]
{'role': 'user', 'content': 'what was the budget?'}
>>> history.close()

`History` serves stored threads (a bot's append -> ask -> append); `Engine` serves history files
and `Thread` objects through the same machinery. Everything a user needs is importable from here
(`dir(semhist)` lists it); the rooms below (`semhist.kernel`, `semhist.indexers`,
`semhist.pipeline`, the front ends) are internals.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Where each public name lives. They are imported on first use (PEP 562): `import semhist` alone,
# which every `semhist --help` and every `semhist.kernel` import does, must not load numpy, FAISS,
# the embedder and the tokenizer (a second or more) before anything needs them.
_WHERE = {
    "Engine": ".engine",
    "History": ".history",
    **dict.fromkeys(("BackendError", "ConfigError", "IndexMismatchError", "InputError", "NotFoundError",
                     "SemhistError", "TooLargeError", "TooLongError"), ".kernel.errors"),
    **dict.fromkeys(("Block", "Message", "Query", "Thread"), ".kernel.model"),
    "Budget": ".kernel.budget",
    **dict.fromkeys(("LLMConfig", "Settings"), ".kernel.settings"),
    **dict.fromkeys(("build_thread", "load", "loads"), ".indexers.loader"),
    **dict.fromkeys(("NEEDS_LLM", "STRATEGIES", "AskResult", "get_strategy"), ".pipeline"),
    **dict.fromkeys(("ANSWER_GUIDANCE", "answer_reminder"), ".pipeline.asker"),
}

if TYPE_CHECKING:  # the same names for type checkers and the API reference, which read the source
    from .engine import Engine
    from .history import History
    from .indexers.loader import build_thread, load, loads
    from .kernel.budget import Budget
    from .kernel.errors import (
        BackendError, ConfigError, IndexMismatchError, InputError, NotFoundError, SemhistError, TooLargeError,
        TooLongError,
    )
    from .kernel.model import Block, Message, Query, Thread
    from .kernel.settings import LLMConfig, Settings
    from .pipeline import NEEDS_LLM, STRATEGIES, AskResult, get_strategy
    from .pipeline.asker import ANSWER_GUIDANCE, answer_reminder

__all__ = [
    "ANSWER_GUIDANCE", "AskResult", "BackendError", "Block", "Budget", "ConfigError", "Engine", "History",
    "IndexMismatchError", "InputError", "LLMConfig", "Message", "NEEDS_LLM", "NotFoundError", "Query",
    "STRATEGIES", "SemhistError", "Settings", "Thread", "TooLargeError", "TooLongError", "answer_reminder",
    "build_thread", "get_strategy", "load", "loads",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use and kept here for the next."""
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """What `__all__` names: the subpackages are internals, not the API."""
    return sorted(__all__)
