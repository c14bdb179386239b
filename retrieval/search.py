"""Query time, stage 2: keyword vector -> scored messages and blocks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from indexers.embed import QUERY, Embedder
from indexers.errors import ConfigError
from indexers.index import HistoryIndex
from indexers.model import Block


@dataclass(frozen=True)
class ScoredBlock:
    block: Block
    score: float
    best_message: int  # position of the message that scored highest in the block


def embed_query(embedder: Embedder, text: str) -> np.ndarray:
    return embedder.embed([text], QUERY)[0]


def score_messages(index: HistoryIndex, query: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k messages most similar to the query: (position, cosine), best first."""
    scores, rows = index.messages.search(query, k)
    return [(index.message_ids[r], float(s)) for s, r in zip(scores, rows) if r >= 0]


def score_blocks(index: HistoryIndex, query: np.ndarray, scoring: str = "best-message") -> list[ScoredBlock]:
    """Every block with its score, best first.

    best-message: a block scores as its most similar message (one mention of an entity is
    not diluted by the rest of the block). joined: one vector for the block's whole text.
    """
    if scoring == "joined":
        return _score_joined(index, query)
    if scoring != "best-message":
        raise ConfigError(f"unknown block scoring {scoring!r}; valid: best-message, joined")
    scores, rows = index.messages.search(query, index.messages.size)
    blocks = index.row_block[rows]
    # rows arrive best first, so a block's first occurrence is its best message
    ids, first = np.unique(blocks, return_index=True)
    order = np.argsort(-scores[first], kind="stable")
    return [ScoredBlock(index.blocks[ids[o]], float(scores[first[o]]), index.message_ids[rows[first[o]]])
            for o in order]


def _score_joined(index: HistoryIndex, query: np.ndarray) -> list[ScoredBlock]:
    if index.block_vectors is None:
        raise ConfigError("this index has no joined-block vectors; rebuild it with block scoring 'joined'")
    scores, ids = index.block_vectors.search(query, index.block_vectors.size)
    return [ScoredBlock(index.blocks[i], float(s), index.blocks[i].first) for s, i in zip(scores, ids)]
