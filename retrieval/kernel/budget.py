"""A prompt's token budget: absolute tokens, a share of the full history, or billed tokens."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InputError

MAX_BUDGET = 100_000_000  # tokens; far beyond any model's context, below float's integer range
_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%|b|billed)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Budget:
    """A hard per-prompt token budget: absolute tokens or a share of the full history.

    A share has a floor: what the prompt needs to keep the conversation going (the system
    prompt, the request and the last two exchanges; `retrieval.pipeline.assemble.floor_cost`).
    25% of a new bot's four turns is otherwise the request alone, and the bot forgets what
    was said a turn ago. A number of tokens is the caller's hard cap: it has no floor, and
    when the last exchanges do not fit the prompt says so."""

    value: float
    relative: bool
    # billed: `value` is input as the provider bills it, what its prompt cache holds counted at
    # the cached price (`Settings.price_model`): "1000b" buys a longer prompt than "1000"
    billed: bool = False

    @classmethod
    def parse(cls, text: str) -> Budget:
        match = _BUDGET.match(str(text))
        if not match:
            raise InputError(f"budget must look like 2000, 10% or 1000b (billed tokens), got {text!r}")
        value, unit = float(match.group(1)), (match.group(2) or "").lower()
        pct = unit == "%"
        if value <= 0 or (pct and value > 100) or value > MAX_BUDGET:
            raise InputError(f"budget out of range: {text!r} (a share is 0-100%, tokens at most {MAX_BUDGET:,})")
        return cls(value / 100 if pct else value, pct, unit in ("b", "billed"))

    def tokens(self, full_history_tokens: int, floor: int = 0) -> int:
        """The budget in tokens; a share never below `floor` (nor above the full history)."""
        if not self.relative:
            return int(self.value)
        return max(int(self.value * full_history_tokens), min(floor, full_history_tokens))

    def __str__(self) -> str:
        return f"{self.value * 100:g}%" if self.relative else f"{int(self.value)}{'b' if self.billed else ''}"
