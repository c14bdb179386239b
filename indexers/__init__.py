"""semhist build time: load and validate histories, segment them into blocks, embed, index.

Nothing heavy is imported here; embedders and FAISS load on first use.
"""

from .errors import BackendError, ConfigError, IndexMismatchError, InputError, SemhistError
from .model import Block, Message, Query, Thread
from .settings import Budget, LLMConfig, Settings

__all__ = [
    "BackendError", "Block", "Budget", "ConfigError", "IndexMismatchError", "InputError",
    "LLMConfig", "Message", "Query", "SemhistError", "Settings", "Thread",
]
