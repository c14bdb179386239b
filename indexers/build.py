"""Build time: thread -> segments -> embeddings (cached) -> FAISS index with a manifest."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version

from .embed import PASSAGE, CachedEmbedder
from .index import FORMAT_VERSION, HistoryIndex, VectorIndex, thread_fingerprint
from .model import Message, Thread
from .segment import Segmenter


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def message_text(msg: Message) -> str:
    """What a message is embedded as (tool calls by their function names when there is no text)."""
    if msg.content:
        return msg.content
    names = [str(c.get("function", {}).get("name", "")) for c in msg.tool_calls or ()]
    return " ".join(n for n in names if n)


def build_index(thread: Thread, embedder: CachedEmbedder, segmenter: Segmenter, *,
                segmenter_name: str, segmenter_params: dict, joined_blocks: bool = False,
                progress: Callable[[int], None] | None = None) -> HistoryIndex:
    """Segment and embed a thread. Embeddings come from the cache when already known."""
    blocks = tuple(segmenter.segment(thread.messages))
    positions = tuple(p for b in blocks for p in b.message_ids)
    vectors = embedder.embed([message_text(thread.messages[p]) for p in positions], PASSAGE, progress)
    block_vectors = None
    if joined_blocks:
        joined = ["\n".join(message_text(thread.messages[p]) for p in b.message_ids) for b in blocks]
        block_vectors = VectorIndex(embedder.embed(joined, PASSAGE))
    manifest = {
        "format": FORMAT_VERSION,
        "embedder": embedder.id,
        "dim": embedder.dim,
        "segmenter": segmenter_name,
        **segmenter_params,
        "joined_block_vectors": joined_blocks,
        "thread_id": thread.id,
        "thread_fingerprint": thread_fingerprint(thread),
        "n_messages": len(thread.messages),
        "n_blocks": len(blocks),
        "versions": {d: _version(d) for d in ("semhist", "faiss-cpu", "numpy")},
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    return HistoryIndex(manifest, blocks, positions, VectorIndex(vectors), block_vectors)
