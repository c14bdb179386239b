"""Who may reach which threads: the service's bearer tokens, each limited to thread-id prefixes.

`SEMHIST_API_TOKEN` opens every thread (the operator's). Scoped tokens come from a JSON file
(`SEMHIST_TOKENS_FILE`) or the environment (`SEMHIST_TOKENS`, the same JSON), never a flag:

    {"tokens": [{"name": "bot-a", "token": "…", "threads": ["acme:", "teams-acme-"]}]}

A token sees a thread when the thread's id starts with one of its prefixes, in every route:
listing, reading, writing, forgetting, the proxy. Thread ids the proxy makes from an OpenAI
`user` are an HMAC of it under the store's secret, under the token's first prefix, so they
cannot be computed from a person's name and land in the token's own threads.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semhist.kernel.errors import ConfigError
from semhist.kernel.ids import THREAD_ID, check_thread_id
from semhist.kernel.settings import Settings
from semhist.kernel.writers import OPERATOR as OPERATOR_WRITER, Writer

from .errors import Forbidden

MIN_TOKEN_CHARS = 16  # a token short enough to guess is refused at start


@dataclass(frozen=True)
class Grant:
    """What one token may reach: `prefixes` of thread ids, or () for every thread."""

    name: str
    prefixes: tuple[str, ...] = ()

    @property
    def everything(self) -> bool:
        return not self.prefixes

    def allows(self, thread_id: str) -> bool:
        return self.everything or thread_id.startswith(self.prefixes)

    def check(self, thread_id: str) -> str:
        if not self.allows(thread_id):
            raise Forbidden(f"this token's threads do not include {thread_id!r}")
        return thread_id

    def writer(self, kind: str = "token") -> Writer:
        """Who writes with this grant: the operator for SEMHIST_API_TOKEN (and a server with no
        tokens, on loopback), else `kind` under the token's name (kernel/writers.py)."""
        if self.everything and kind == "token":
            return OPERATOR_WRITER
        scoped = self is not OPEN and not self.everything  # its idempotency keys are its own
        return Writer(kind, None if self is OPEN else self.name, self.name if scoped else None)

    def user_thread(self, user: str, secret: bytes) -> str:
        """The thread for an OpenAI `user`: a keyed digest, never the name itself (an e-mail
        address would be stored, listed and echoed), under this token's first prefix."""
        digest = hmac.new(secret, user.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:40]
        return check_thread_id(f"{self.prefixes[0] if self.prefixes else ''}user-{digest}")


OPEN = Grant("open")  # no token configured: the server listens on loopback only
OPERATOR = "operator"  # the grant of SEMHIST_API_TOKEN


class Access:
    """The grants by token. Tokens are kept as SHA-256 digests and looked up by digest, so no
    comparison runs over the secret itself, and they are never logged."""

    def __init__(self, grants: dict[str, Grant]):
        self._grants = {_digest(token): grant for token, grant in grants.items()}

    @property
    def open(self) -> bool:
        return not self._grants

    def grant(self, given: str | None) -> Grant | None:
        """The grant of a presented token; None when it opens nothing."""
        if self.open:
            return OPEN
        return self._grants.get(_digest(given)) if given else None

    @classmethod
    def from_settings(cls, settings: Settings) -> Access:
        grants: dict[str, Grant] = {}
        if settings.api_token:
            grants[settings.api_token] = Grant(OPERATOR)
        if settings.tokens_file is not None:
            grants.update(_parse(_read(settings.tokens_file), str(settings.tokens_file), grants))
        if settings.tokens:
            grants.update(_parse(settings.tokens, "SEMHIST_TOKENS", grants))
        _no_overlap(list(grants.values()))
        return cls(grants)


def _no_overlap(grants: list[Grant]) -> None:
    """A token whose prefix starts another token's (`acme` and `acme-corp:`) would reach that
    token's threads without anyone meaning it: refused at start. The same prefix on two tokens
    is a choice (two bots sharing threads) and stands."""
    for grant in grants:
        for other in grants:
            for mine in grant.prefixes:
                theirs = next((p for p in other.prefixes if p != mine and p.startswith(mine)), None)
                if other is not grant and theirs is not None:
                    raise ConfigError(f"token {grant.name}'s prefix {mine!r} also matches token {other.name}'s "
                                      f"{theirs!r}: {grant.name} would reach {other.name}'s threads. End each "
                                      "prefix with a separator (acme: or acme-) so that none starts another")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"tokens file {path}: {exc}") from exc


def _parse(text: str, where: str, seen: dict[str, Grant]) -> dict[str, Grant]:
    try:
        entries = json.loads(text)["tokens"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f'{where}: expected {{"tokens": [{{"name", "token", "threads"}}...]}} ({exc})') from exc
    out: dict[str, Grant] = {}
    for i, entry in enumerate(entries if isinstance(entries, list) else [None]):
        token, grant = _entry(entry, f"{where}, token {i + 1}")
        if token in seen or token in out:
            raise ConfigError(f"{where}, token {i + 1} ({grant.name}): the same token is given twice")
        out[token] = grant
    return out


def _entry(entry: Any, where: str) -> tuple[str, Grant]:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected an object with name, token and threads")
    name, token, prefixes = entry.get("name"), entry.get("token"), entry.get("threads")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: a name is needed (it stands for the token in logs)")
    if not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"{where} ({name}): the token must be a string of at least {MIN_TOKEN_CHARS} characters")
    if not isinstance(prefixes, list) or not prefixes or not all(
            isinstance(p, str) and THREAD_ID.fullmatch(p) for p in prefixes):
        raise ConfigError(f"{where} ({name}): threads must be a non-empty list of thread-id prefixes "
                          "(A-Z a-z 0-9 _ . : ; @ = + -); the operator's SEMHIST_API_TOKEN opens every thread")
    return token, Grant(name, tuple(prefixes))
