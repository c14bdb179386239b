"""A thread's own hybrid search for a text, both sides' scores shown (the inspector's search
box): each message's cosine with the query, its BM25 score for the query's terms, and the two
fused as `blocks` ranks messages (dense rank plus weighted lexical rank)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from semhist.indexers.lexical import tokenize
from semhist.kernel.model import StoredMessage

from .history.facade import History
from .pipeline.search import dense_rows, embed_query, fused_rows, searched_terms


@dataclass(frozen=True)
class Hit:
    message: StoredMessage
    dense: float  # cosine with the query
    lexical: float  # BM25 of the query's terms (0: none matched)
    fused: float  # the rank fusion the search orders by


def hybrid_search(history: History, thread_id: str, query: str, k: int = 20) -> list[Hit]:
    """The `k` best messages of a thread (up to `view_limit` messages) for `query`, best first."""
    index = history.index(thread_id)
    terms = searched_terms(index, tokenize(query))
    dense = dense_rows(index, embed_query(history.parts.embedder, query))
    lexical = index.lexical.scores(terms)
    fused = fused_rows(index, dense, terms)
    rows = np.argsort(-fused, kind="stable")[:k]
    ids = [index.messages[index.rows[r]].index for r in rows]
    stored = {m.id: m for m in history.store.messages(thread_id, ids=ids)}
    return [Hit(stored[i], round(float(dense[r]), 4), round(float(lexical[r]), 4), round(float(fused[r]), 6))
            for r, i in zip(rows, ids) if i in stored]
