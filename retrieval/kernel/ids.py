"""Thread ids and message keys: what the store accepts as a name, checked once at the edge."""

from __future__ import annotations

import hashlib
import re

from .errors import InputError

MAX_KEY = 512  # characters of a caller's message id (Teams ids are under 100)

# Teams conversation ids look like "19:abc@thread.v2" or "a:1Xyz;messageid=12"; anything with a
# slash, a backslash, whitespace or ".." is refused, so an id can never walk out of a directory.
THREAD_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:;@=+\-]{0,255}$")

def check_thread_id(thread_id: str) -> str:
    if not isinstance(thread_id, str) or not THREAD_ID.fullmatch(thread_id) or ".." in thread_id:
        raise InputError(f"invalid thread id {thread_id!r}: use 1-256 characters from A-Z a-z 0-9 _ . : ; @ = + -, "
                         "starting with a letter, digit or _, and no '..'")
    return thread_id


def thread_id_for(name: str, prefix: str = "conv-") -> str:
    """The stored thread for an outside name (a Teams conversation id, an OpenAI `user`): the
    name itself when the store accepts it, else a stable digest of it (names with '|', '/', spaces)."""
    try:
        return check_thread_id(name)
    except InputError:
        return prefix + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:40]
