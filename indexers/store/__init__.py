"""The persistent store: the source of truth for threads, messages, their vectors, blocks,
manifests, summaries, the structured list and the turn log. Anything held in memory or in a
FAISS file can be rebuilt from it.

One SQL implementation serves SQLite (the default, one file, WAL) and PostgreSQL (several
bot replicas sharing threads); the backends differ only in connection, placeholders, column
types and full-text search. Every read and write names one thread id.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote, urlparse

from semhist.kernel.errors import ConfigError
from .migrations import MIGRATIONS
from .protocols import StoreForgetter, StoreReader, StoreWriter
from .records import (AppendResult, Changes, StaleRules, ClosedBlock, Key, Marker, NewMessage, NoteRecord, StoredBlock,
                      StoredMessage, SummaryRecord, ThreadInfo)
from .sql import SQLStore

__all__ = ["MIGRATIONS", "AppendResult", "Changes", "ClosedBlock", "Key", "Marker", "NewMessage", "NoteRecord",
           "SQLStore", "StaleRules", "StoreForgetter", "StoreReader", "StoreWriter", "StoredBlock", "StoredMessage",
           "SummaryRecord", "ThreadInfo", "open_store", "STORES"]


def _sqlite(url: str) -> SQLStore:
    parsed = urlparse(url)
    path = unquote(parsed.path)
    if parsed.netloc:  # sqlite://relative/path is a common slip: say what we expect
        raise ConfigError(f"{url!r}: write sqlite:///relative/path.db or sqlite:////absolute/path.db")
    if not path or path == "/":
        raise ConfigError(f"{url!r} names no file")
    from .sqlite import SQLiteStore

    return SQLiteStore(path[1:] if path.startswith("/") else path)


def _postgres(url: str) -> SQLStore:
    from .postgres import PostgresStore

    return PostgresStore(url)


STORES: dict[str, Callable[[str], SQLStore]] = {"sqlite": _sqlite, "postgresql": _postgres, "postgres": _postgres}


def open_store(url: str) -> SQLStore:
    """The store a database URL names: sqlite:///path.db or postgresql://user@host/db."""
    scheme = urlparse(url).scheme
    try:
        factory = STORES[scheme]
    except KeyError:
        raise ConfigError(f"unknown database URL scheme {scheme!r} in {url!r}; valid: "
                          f"{', '.join(s + '://' for s in sorted(STORES))}") from None
    return factory(url)
