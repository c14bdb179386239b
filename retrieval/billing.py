"""What a prompt costs on a provider's bill when part of it is read from the prompt cache.

Providers cache prompt prefixes: a prompt that starts with the same tokens as a recent one
bills those tokens at about a tenth of the input price (OpenAI, Anthropic, Gemini, Mistral).
Anthropic (and OpenAI's newest models) also bill the tokens written to the cache at 1.25x;
OpenAI caches only prefixes of 1,024 tokens or more, in 128-token steps. Costs here are in
uncached-token equivalents: a prompt of 1,000 tokens read whole from the cache bills 100.

`cached_tokens` measures the prefix a prompt shares with the one before, in cl100k tokens of
each message's role, name, content and tool calls: what a provider's cache can hold.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from semhist.kernel.errors import ConfigError
from semhist.kernel.tokens import count_message, count_text, encode


@dataclass(frozen=True)
class PriceModel:
    """How a provider bills input: cached tokens at `cached`, the rest at `written` (1.0 when
    writing to the cache costs nothing extra); a cached prefix counts only from `minimum`
    tokens, rounded down to `granularity`."""

    name: str
    cached: float = 0.1
    written: float = 1.0
    minimum: int = 0
    granularity: int = 1

    def billed(self, tokens: int, cached: int) -> float:
        """Input billed for a prompt of `tokens` of which the first `cached` were in the cache."""
        usable = cached if cached >= self.minimum else 0
        if usable and self.granularity > 1:
            usable = self.minimum + (usable - self.minimum) // self.granularity * self.granularity
        usable = min(usable, tokens)
        return usable * self.cached + (tokens - usable) * self.written


PRICE_MODELS: dict[str, PriceModel] = {
    "openai": PriceModel("openai", minimum=1024, granularity=128),
    "anthropic": PriceModel("anthropic", written=1.25),
    "none": PriceModel("none", cached=1.0),
}


def price_model(name: str) -> PriceModel:
    try:
        return PRICE_MODELS[name]
    except KeyError:
        raise ConfigError(f"unknown price model {name!r}; valid: {', '.join(PRICE_MODELS)}") from None


def shared_marks(before: Sequence[Sequence[Any]], now: Sequence[Sequence[Any]]) -> int:
    """Tokens of `now` that repeat the start of `before`, by whole messages; each prompt given
    as its turn-log marks, one [digest, tokens] per message."""
    shared = 0
    for a, b in zip(before, now):
        if a[0] != b[0]:
            break
        shared += b[1]
    return shared


def warm_tokens(messages: Sequence[Mapping[str, Any]], append_only: bool) -> int:
    """What a warm cache would hold of this prompt had the previous turn's been built the same
    way, by whole messages: a prompt that only grows at its end (`full` without a budget, the
    cache layout between its restarts) repeats everything before the previous exchange; any
    other repeats its leading system messages only (what follows them changes every turn)."""
    if append_only:
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        end = users[-2] if len(users) >= 2 else 0
    else:
        end = 0
        while end < len(messages) and messages[end].get("role") == "system" \
                and "<retrieved_history>" not in str(messages[end].get("content")):
            end += 1
    return sum(count_message(m) for m in messages[:end])


def _serialized(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, sort_keys=True)
    calls = json.dumps(message.get("tool_calls"), ensure_ascii=False, sort_keys=True) if message.get("tool_calls") \
        else ""
    return f"<{message.get('role')}:{message.get('name') or ''}:{message.get('tool_call_id') or ''}>{text}{calls}"


@lru_cache(maxsize=4096)
def _tokens(serialized: str) -> tuple[int, ...]:
    return tuple(encode(serialized))


def message_tokens(message: Mapping[str, Any]) -> int:
    """The tokens of one message as `cached_tokens` counts them."""
    return count_text(_serialized(message))


def prompt_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    return sum(message_tokens(m) for m in messages)


def cached_tokens(previous: Sequence[Mapping[str, Any]] | None, current: Sequence[Mapping[str, Any]]) -> int:
    """How many of `current`'s tokens repeat the start of `previous`: whole messages while they
    are equal, then the common start of the first that differs."""
    if not previous:
        return 0
    shared = 0
    for before, now in zip(previous, current):
        a, b = _serialized(before), _serialized(now)
        if a == b:
            shared += count_text(b)
            continue
        ta, tb = _tokens(a), _tokens(b)
        n = 0
        for x, y in zip(ta, tb):
            if x != y:
                break
            n += 1
        return shared + n
    return shared
