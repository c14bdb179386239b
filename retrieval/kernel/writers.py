"""Roles follow the writer: only the operator speaks as the operator.

A stored `system` or `developer` message goes first in every later prompt of its thread, as
the operator's instruction. So it is kept as one only when the operator wrote it: the library,
the CLI, the service's SEMHIST_API_TOKEN (`operator_writers` may add scoped tokens, MCP
clients and the proxy). From any other writer it is stored as quoted history of a speaker
named after the role: the text is kept and found, and a prompt shows it as
`user (named "system"): ...` inside the retrieved history, never as an instruction. It is not
refused: a bot's write must not fail on what an agent or a client put in its messages, and the
proxy cannot refuse a chat completion for a system message a client sends mid-conversation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OPERATOR_ROLES = ("system", "developer")


@dataclass(frozen=True)
class Writer:
    """Who writes: `kind` (operator, token, mcp, proxy; settings.WRITER_KINDS) and, for a
    token, its name. `label` is what the store and the turn log record. `keys`: whose
    idempotency keys it writes under (a scoped token's name; None: the operator's)."""

    kind: str = "operator"
    name: str | None = None
    keys: str | None = None

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.name}" if self.name else self.kind


# Between a scope and a key: not printable, so no key a client sends (they are checked
# printable) can spell another writer's scope.
KEY_SCOPE_SEPARATOR = "\x1f"


def scoped_key(key: str | None, writer: Writer) -> str | None:
    """The key as stored: a scoped token's keys are its own, so one that takes a key first
    cannot make the operator's (or another token's) later message under it a no-op. The
    operator's are stored as given (the library, the CLI and the Teams agent write them)."""
    if key is None or writer.keys is None:
        return key
    return f"{writer.keys}{KEY_SCOPE_SEPARATOR}{key}"


OPERATOR = Writer()


def as_written(raw: Mapping[str, Any], writer: Writer, trusted: frozenset[str]) -> tuple[dict[str, Any], bool]:
    """The message as it is stored, and whether its operator role was taken from it."""
    role = raw.get("role")
    if role not in OPERATOR_ROLES or writer.kind in trusted:
        return dict(raw), False
    return {**raw, "role": "user", "name": role}, True
