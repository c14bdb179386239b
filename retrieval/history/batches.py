"""A batch of OpenAI chat messages on its way to the store: each checked for its key and given
its time, operator roles kept or quoted by who writes them (kernel/writers.py), and the
operator messages signed with their writer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from semhist.kernel.errors import InputError
from semhist.kernel.ids import MAX_KEY
from semhist.kernel.model import Message
from semhist.kernel.writers import Writer, as_written, scoped_key


def prepared(messages: Sequence[Mapping[str, Any]], writer: Writer, trusted: frozenset[str]
             ) -> tuple[list[dict[str, Any]], list[str | None], tuple[int, ...]]:
    """(messages as they are stored, their keys, the positions whose operator role was quoted)."""
    if not messages:
        raise InputError("no messages to add")
    now = datetime.now(timezone.utc).isoformat()
    keys: list[str | None] = []
    raw, quoted = [], []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise InputError(f"message {i}: expected an object", index=i, field="message")
        key = m.get("id")
        if key is not None and (not isinstance(key, str) or not key.strip() or len(key) > MAX_KEY
                                or not key.isprintable()):  # no NUL, no lone surrogate
            raise InputError(f"message {i}, field 'id': expected a non-empty string of at most {MAX_KEY} "
                             "printable characters", index=i, field="id")
        keys.append(scoped_key(key, writer))
        written, demoted = as_written(m, writer, trusted)
        if demoted:
            quoted.append(i)
        raw.append({**{k: v for k, v in written.items() if k != "id" and v is not None},
                    "timestamp": m.get("timestamp") if m.get("timestamp") is not None else now})
    return raw, keys, tuple(quoted)


def signed(messages: Sequence[Message], writer: Writer) -> tuple[Message, ...]:
    """The operator messages marked with who wrote them (the store keeps it, the turn log says it)."""
    return tuple(replace(m, writer=writer.label) if m.role == "system" else m for m in messages)
