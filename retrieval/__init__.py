"""semhist query time: request -> keyword -> search -> select -> assemble -> messages.

`History` serves stored threads (a bot's append -> ask -> append); `Engine` serves history
files and `Thread` objects through the same machinery.
"""

from .engine import Engine
from .history import History
from .pipeline import NEEDS_LLM, STRATEGIES, AskResult, get_strategy

__all__ = ["AskResult", "Engine", "History", "NEEDS_LLM", "STRATEGIES", "get_strategy"]
