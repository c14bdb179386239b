"""What a stored thread's vectors and blocks mean: the embedder and the segmentation they
were made with. One manifest per thread, in the store; asking with other settings is refused
with the command that fixes it."""

from __future__ import annotations

from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from semhist.kernel.errors import IndexMismatchError
from ..lexical import TERMS_VERSION
from semhist.kernel.settings import Settings

FORMAT_VERSION = 4
# manifest key -> (settings field, CLI flag) for the fix command
_SEGMENTATION = {"segmenter": ("segmenter", "--segmenter"), "gap_seconds": ("gap_seconds", "--gap"),
                 "max_block_tokens": ("max_block_tokens", "--max-block-tokens"),
                 "min_block_messages": ("min_block_messages", "--min-block-messages"),
                 "percentile": ("topic_percentile", "--topic-percentile"),
                 "model": ("segmenter_model", "--segmenter-model"),
                 "min_tokens": ("topic_min_tokens", "--topic-min-tokens")}


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def manifest(settings: Settings, embedder_id: str, dim: int) -> dict[str, Any]:
    return {"format": FORMAT_VERSION, "embedder": embedder_id, "dim": dim, "segmenter": settings.segmenter,
            **settings.segment_params, "terms": TERMS_VERSION,
            "versions": {d: _version(d) for d in ("semhist", "faiss-cpu", "numpy", "janome")},
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def mismatch(stored: dict[str, Any] | None, wanted: dict[str, Any], settings: Settings
             ) -> tuple[str, str, Any, Any] | None:
    """The first way a stored manifest differs from `wanted`: (what, CLI flag, stored value,
    the value that asks for `wanted`). Keys an older manifest lacks are not held against it."""
    if not stored:
        return None
    if stored.get("embedder") not in (None, wanted["embedder"]):
        return f"embedder {stored['embedder']!r}, not {wanted['embedder']!r}", "--embedder", \
            stored["embedder"].split("@")[0], settings.embedder
    for key, (name, flag) in _SEGMENTATION.items():
        if key in stored and stored[key] != wanted.get(key):
            shown = [("unset" if v is None else repr(v)) for v in (stored[key], wanted.get(key))]
            return f"{name}={shown[0]}, not {shown[1]}", flag, stored[key], wanted.get(key)
    return None


def option(flag: str, value: Any) -> str:
    """` --flag value` as a command line sets it; nothing for an unset value (the default)."""
    return "" if value is None else f" {flag} {value}"


def check(stored: dict[str, Any] | None, wanted: dict[str, Any], thread_id: str, settings: Settings) -> None:
    """Refuse a stored thread built with another embedder or segmentation than `wanted`."""
    found = mismatch(stored, wanted, settings)
    if found:
        what, flag, _, value = found
        raise IndexMismatchError(f"thread {thread_id} was indexed with {what}; "
                                 f"run: semhist reindex --thread {thread_id}{option(flag, value)}")


def terms_version(stored: dict[str, Any] | None) -> int:
    """The tokenizer rules a stored thread's terms were made with (1: before they were recorded)."""
    return int((stored or {}).get("terms", 1))


def complete(stored: dict[str, Any] | None, wanted: dict[str, Any]) -> bool:
    """True when the stored manifest already records everything `wanted` does."""
    return bool(stored) and all(k in stored for k in ("embedder", "dim", *(k for k in _SEGMENTATION if k in wanted)))
