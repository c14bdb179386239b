"""Query time: request -> keyword -> search -> select -> assemble -> OpenAI messages."""

from .asker import AskResult, Asker
from .strategies import NEEDS_LLM, STRATEGIES, get_strategy

__all__ = ["AskResult", "Asker", "NEEDS_LLM", "STRATEGIES", "get_strategy"]
