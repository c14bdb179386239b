"""semhist query time: request -> keyword -> search -> select -> assemble -> messages."""

from .engine import AskResult, Engine
from .strategies import STRATEGIES, get_strategy

__all__ = ["AskResult", "Engine", "STRATEGIES", "get_strategy"]
