"""Build time: thread -> embeddings (cached) -> segments -> FAISS + BM25 index with a manifest."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version

import numpy as np

from .embed import PASSAGE, CachedEmbedder
from .index import FORMAT_VERSION, HistoryIndex, VectorIndex, thread_fingerprint
from .lexical import tokenize
from .model import Message, Thread
from .segment import Segmenter


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def message_text(msg: Message) -> str:
    """What a message is searched as: its text (tool calls by their function names)."""
    if msg.content:
        return msg.content
    names = [str(c.get("function", {}).get("name", "")) for c in msg.tool_calls or ()]
    return " ".join(n for n in names if n)


def embedding_text(msg: Message) -> str:
    """What a message is embedded as. The author's name goes with the text because requests
    name people ("what did Caroline research?"); measured on LoCoMo it lifts recall."""
    text = message_text(msg)
    return f"{msg.name}: {text}" if msg.name else text


def build_index(thread: Thread, embedder: CachedEmbedder, segmenter: Segmenter, *,
                segmenter_name: str, segmenter_params: dict,
                progress: Callable[[int], None] | None = None) -> HistoryIndex:
    """Embed, segment and index a thread. Embeddings come from the cache when already known."""
    positions = [p for p, m in enumerate(thread.messages) if m.role != "system"]
    rows = embedder.embed([embedding_text(thread.messages[p]) for p in positions], PASSAGE, progress)
    vectors = np.zeros((len(thread.messages), embedder.dim), dtype=np.float32)
    vectors[positions] = rows
    blocks = tuple(segmenter.segment(thread.messages, vectors))
    ordered = tuple(p for b in blocks for p in b.message_ids)
    terms = tuple(tuple(tokenize(message_text(thread.messages[p]))) for p in ordered)
    manifest = {
        "format": FORMAT_VERSION,
        "embedder": embedder.id,
        "dim": embedder.dim,
        "segmenter": segmenter_name,
        **segmenter_params,
        "thread_id": thread.id,
        "thread_fingerprint": thread_fingerprint(thread),
        "n_messages": len(thread.messages),
        "n_blocks": len(blocks),
        "versions": {d: _version(d) for d in ("semhist", "faiss-cpu", "numpy", "janome")},
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    return HistoryIndex(manifest, blocks, ordered, VectorIndex(vectors[list(ordered)]), terms)
