"""How a closed block's terms are written for the database's full-text index.

Each term (a janome base form or a Snowball stem, as the ranker uses them) becomes an ASCII
token made of a hash of the thread id and a hash of the term. Both backends' tokenizers then
see plain alphanumeric words whatever the language, and a thread's tokens never match
another thread's, so a lookup touches only the thread asked for.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from functools import lru_cache


@lru_cache(maxsize=4096)
def _thread_key(thread_id: str) -> str:
    return hashlib.blake2b(thread_id.encode(), digest_size=4).hexdigest()


@lru_cache(maxsize=65536)
def _term_key(term: str) -> str:
    return hashlib.blake2b(term.encode(), digest_size=5).hexdigest()


def token(thread_id: str, term: str) -> str:
    return f"t{_thread_key(thread_id)}{_term_key(term)}"


def block_document(thread_id: str, terms: Iterable[str]) -> str:
    """The indexed text of a block: one token per term occurrence (so counts are kept)."""
    return " ".join(token(thread_id, t) for t in terms)


def query_tokens(thread_id: str, terms: Iterable[str]) -> list[str]:
    return sorted({token(thread_id, t) for t in terms if t})
