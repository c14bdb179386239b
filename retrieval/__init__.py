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

from .engine import Engine
from .history import History
from .kernel.errors import (
    BackendError, ConfigError, IndexMismatchError, InputError, NotFoundError, SemhistError, TooLargeError,
    TooLongError,
)
from .kernel.model import Block, Message, Query, Thread
from .kernel.budget import Budget
from .kernel.settings import LLMConfig, Settings
from .indexers.loader import build_thread, load, loads
from .pipeline import NEEDS_LLM, STRATEGIES, AskResult, get_strategy
from .pipeline.asker import ANSWER_GUIDANCE, answer_reminder

__all__ = [
    "ANSWER_GUIDANCE", "AskResult", "BackendError", "Block", "Budget", "ConfigError", "Engine", "History",
    "IndexMismatchError", "InputError", "LLMConfig", "Message", "NEEDS_LLM", "NotFoundError", "Query",
    "STRATEGIES", "SemhistError", "Settings", "Thread", "TooLargeError", "TooLongError", "answer_reminder", "build_thread", "get_strategy", "load", "loads",
]


def __dir__() -> list[str]:
    """What `__all__` names: the subpackages imported above are internals, not the API."""
    return sorted(__all__)
