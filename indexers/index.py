"""The searchable form of one thread: blocks, message vectors in FAISS, and a manifest.

The manifest records what the vectors mean (embedder id, dimension, segmentation,
versions); loading refuses an index whose embedder is not the one asked for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from .errors import BackendError, ConfigError, IndexMismatchError, InputError
from .lexical import BM25
from .model import Block, Thread

FORMAT_VERSION = 3


def _faiss():
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - core dependency
        raise ConfigError("faiss-cpu is not installed: pip install semhist") from exc
    return faiss


def thread_fingerprint(thread: Thread) -> str:
    """Identifies the whole thread, so a stale index is detected."""
    return thread.prefix_digests[-1] if thread.messages else ""


class VectorIndex:
    """Exact inner-product search over normalized rows; ids are row numbers."""

    def __init__(self, vectors: np.ndarray):
        faiss = _faiss()
        self.dim = int(vectors.shape[1])
        self._index = faiss.IndexFlatIP(self.dim)
        if len(vectors):
            self._index.add(np.ascontiguousarray(vectors, dtype=np.float32))

    @property
    def size(self) -> int:
        return int(self._index.ntotal)

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, ids) of the k best rows, best first; k is capped at the index size."""
        k = min(k, self.size)
        if k <= 0:
            return np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)
        scores, ids = self._index.search(np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32), k)
        return scores[0], ids[0]

    def save(self, path: Path) -> None:
        _faiss().write_index(self._index, str(path))

    @classmethod
    def load(cls, path: Path) -> VectorIndex:
        obj = cls.__new__(cls)
        if not path.exists():
            raise InputError(f"{path} is missing; rebuild the index with semhist index")
        try:
            obj._index = _faiss().read_index(str(path))
        except RuntimeError as exc:
            raise BackendError(f"cannot read FAISS index {path}: {exc}") from exc
        obj.dim = int(obj._index.d)
        return obj


@dataclass(frozen=True)
class HistoryIndex:
    """Blocks and vectors of one thread. Message rows follow `message_ids` order."""

    manifest: dict[str, Any]
    blocks: tuple[Block, ...]
    message_ids: tuple[int, ...]  # positions in thread.messages of each vector row
    messages: VectorIndex
    terms: tuple[tuple[str, ...], ...]  # BM25 terms of each message row

    @property
    def embedder_id(self) -> str:
        return self.manifest["embedder"]

    def warm(self) -> None:
        """Build the derived lookups now (index time), not on the first query."""
        for name in ("lexical", "block_lexical", "block_rows", "row_block"):
            getattr(self, name)

    @cached_property
    def lexical(self) -> BM25:
        """BM25 over single messages."""
        return BM25(self.terms)

    @cached_property
    def block_lexical(self) -> BM25:
        """BM25 over whole blocks: a block that has the city and the topic wins over a
        message that has only one of them."""
        rows = {p: i for i, p in enumerate(self.message_ids)}
        return BM25([[t for p in b.message_ids for t in self.terms[rows[p]]] for b in self.blocks])

    @cached_property
    def block_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(first row, end row) of each block: rows are stored block after block."""
        sizes = np.array([len(b.message_ids) for b in self.blocks], dtype=np.int64)
        ends = np.cumsum(sizes)
        return ends - sizes, ends

    @cached_property
    def row_block(self) -> np.ndarray:
        """For each message row, the id of its block."""
        owner = {pos: b.id for b in self.blocks for pos in b.message_ids}
        return np.array([owner[p] for p in self.message_ids], dtype=np.int64)

    def check(self, embedder_id: str, thread: Thread | None = None) -> None:
        if self.embedder_id != embedder_id:
            raise IndexMismatchError(
                f"this index was built with embedder {self.embedder_id!r}, not {embedder_id!r}; "
                "rebuild it (semhist index) or ask with the same --embedder"
            )
        if thread is not None and self.manifest.get("thread_fingerprint") != thread_fingerprint(thread):
            raise IndexMismatchError("this index was built from a different version of the thread; rebuild it")

    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.messages.save(directory / "messages.faiss")
        payload = {
            "manifest": self.manifest,
            "message_ids": list(self.message_ids),
            "terms": [list(t) for t in self.terms],
            "blocks": [
                {"id": b.id, "message_ids": list(b.message_ids), "tokens": b.tokens, "parts": list(b.parts),
                 "start_time": b.start_time.isoformat() if b.start_time else None,
                 "end_time": b.end_time.isoformat() if b.end_time else None}
                for b in self.blocks
            ],
        }
        (directory / "index.json").write_text(json.dumps(payload, ensure_ascii=False, indent=1), encoding="utf-8")
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> HistoryIndex:
        directory = Path(directory)
        try:
            payload = json.loads((directory / "index.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"{directory} holds no semhist index (index.json is missing)") from None
        except (json.JSONDecodeError, OSError) as exc:
            raise InputError(f"{directory}/index.json is unreadable: {exc}") from exc
        manifest = payload.get("manifest", {})
        if manifest.get("format") != FORMAT_VERSION:
            raise IndexMismatchError(
                f"index format {manifest.get('format')!r} is not {FORMAT_VERSION}; rebuild it with semhist index"
            )
        stamp = lambda s: datetime.fromisoformat(s) if s else None  # noqa: E731
        blocks = tuple(
            Block(b["id"], tuple(b["message_ids"]), stamp(b["start_time"]), stamp(b["end_time"]), b["tokens"],
                  tuple(b.get("parts", (0,))))
            for b in payload["blocks"]
        )
        messages = VectorIndex.load(directory / "messages.faiss")
        if messages.dim != manifest.get("dim") or messages.size != len(payload["message_ids"]):
            raise IndexMismatchError(f"{directory}: vectors do not match the manifest; rebuild the index")
        terms = tuple(tuple(t) for t in payload.get("terms", []))
        if len(terms) != len(payload["message_ids"]):
            raise IndexMismatchError(f"{directory}: lexical terms do not match the messages; rebuild the index")
        return cls(manifest, blocks, tuple(payload["message_ids"]), messages, terms)
