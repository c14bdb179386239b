"""Query time, stage 2: query -> scored messages and blocks.

Dense (cosine over normalized embeddings, FAISS) and lexical (BM25) evidence are fused by
rank (reciprocal rank fusion), so neither score scale has to be calibrated per model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from semhist.indexers.embed import QUERY, Embedder
from semhist.indexers.index.thread_index import ThreadIndex
from semhist.indexers.lexical import tokenize
from semhist.kernel.model import Block, Message

RRF_K = 60
# BM25 counts twice: on LoCoMo it beat cosine alone (0.72 vs 0.56 evidence recall at a 10%
# budget) and the 2:1 fusion beat both (benchmarks/results.md).
LEXICAL_WEIGHT = 2.0


@dataclass(frozen=True)
class ScoredBlock:
    block: Block
    score: float
    best_message: int  # position of the message that scored highest in the block


def embed_query(embedder: Embedder, text: str) -> np.ndarray:
    return embedder.embed([text], QUERY)[0]


def dense_rows(index: ThreadIndex, query: np.ndarray) -> np.ndarray:
    """Cosine of every message row with the query, in row order."""
    return index.dense(query)


def rrf(parts: Sequence[tuple[np.ndarray, float]], k: int = RRF_K) -> np.ndarray:
    """Weighted reciprocal rank fusion; a zero lexical score adds nothing (no term matched)."""
    total = np.zeros(len(parts[0][0]), dtype=np.float64)
    for scores, weight in parts:
        order = np.argsort(-scores, kind="stable")
        ranks = np.empty(len(scores), dtype=np.float64)
        ranks[order] = np.arange(1, len(scores) + 1)
        total += weight / (k + ranks)
    return total


def searched_terms(index: ThreadIndex, terms: Sequence[str]) -> list[str]:
    """The request's lexical terms without the name of the one author of the thread it names.

    In a chat between people a name inside a message mostly addresses someone else ("Thanks,
    Melanie!" is Caroline's), so searching "What does Melanie do?" for "Melanie" finds Caroline's
    messages. The dense side still carries the name: messages are embedded with their author's.
    LoCoMo +0.009 / +0.003 / +0.002 at 5 / 10 / 25%, multi-hop +0.020 / +0.030 / +0.011
    (benchmarks/multihop.md).
    """
    # a name is asked for by one of its terms of two characters or more: the single characters
    # of a Chinese name (王, 小) are common words of their own
    asked = {t for t in terms if len(t) > 1}
    named = [name for name in index.derived("author terms", AuthorTerms).names if name & asked]
    return [t for t in terms if t not in named[0]] if len(named) == 1 else list(terms)


@lru_cache(maxsize=4096)
def name_terms(name: str) -> frozenset[str]:
    """A speaker's name as its terms. Names recur in every view of a long thread and across
    threads, and Snowball takes about half a millisecond a name: 3 ms of each ask on a view."""
    return frozenset(tokenize(name))


class AuthorTerms:
    """Each author's name as its terms ("Mary Ann" is one author of two terms), and each row's
    author by number, kept as messages arrive: a name is tokenized the first time it is seen,
    never again (a Teams thread names its speaker on every message), and an append costs what
    it appends (the row numbers grow by doubling)."""

    def __init__(self) -> None:
        self._names: dict[str, frozenset[str]] = {}
        self.number: dict[frozenset[str], int] = {}  # an author's terms -> its number, from 1
        self._rows = np.zeros(64, dtype=np.int32)  # each row's author number (0: none)
        self._n = 0

    def extend(self, messages: Sequence[Message], start: int) -> None:
        new = []
        for m in messages[start:]:
            if m.role == "system":  # no row (ThreadIndex._add_rows)
                continue
            terms = self._names.get(m.name) if m.name else None
            if m.name and terms is None:
                terms = self._names[m.name] = name_terms(m.name)
            new.append(self.number.setdefault(terms, len(self.number) + 1) if terms else 0)
        if self._n + len(new) > len(self._rows):
            self._rows = np.concatenate([self._rows, np.zeros(max(len(self._rows), len(new)), dtype=np.int32)])
        self._rows[self._n:self._n + len(new)] = new
        self._n += len(new)

    def value(self, index: ThreadIndex) -> AuthorTerms:
        return self

    @property
    def names(self) -> tuple[frozenset[str], ...]:
        """Every author's name, as its terms."""
        return tuple(self.number)

    def rows_by(self, index: ThreadIndex, names: Sequence[frozenset[str]]) -> np.ndarray | None:
        """A row mask: the messages written by one of `names` (None if the rows do not line up)."""
        if self._n != len(index.rows):
            return None
        return np.isin(self._rows[:self._n], [self.number[n] for n in names])


def named_authors(index: ThreadIndex, terms: Sequence[str]) -> list[frozenset[str]]:
    """The thread's authors the request names (by a term of two characters or more)."""
    asked = {t for t in terms if len(t) > 1}
    return [name for name in index.derived("author terms", AuthorTerms).names if name & asked]


def author_blocks(index: ThreadIndex, terms: Sequence[str]) -> np.ndarray | None:
    """Per block: whether an author the request names speaks in it ("what did Caroline say about
    X" on a thread of many conversations means Caroline's talk; a feature of the learned ranker,
    ranker.py); None when it names none or when every block has them (one conversation between
    two people: no information)."""
    names = named_authors(index, terms)
    if not names or not len(index.blocks):
        return None
    rows = index.derived("author terms", AuthorTerms).rows_by(index, names)
    if rows is None:
        return None
    first, _ = index.block_rows
    spoken = np.maximum.reduceat(rows.astype(np.int8), first) > 0
    if spoken.all() or not spoken.any():
        return None
    return spoken


def fused_rows(index: ThreadIndex, dense: np.ndarray, terms: Sequence[str],
               lexical: np.ndarray | None = None) -> np.ndarray:
    """Per message row: dense and BM25 ranks fused (`lexical`: the rows' BM25 of `terms`, when
    the caller has it already)."""
    lexical = index.lexical.scores(terms) if lexical is None else lexical
    if not lexical.any():
        return rrf([(dense, 1.0)])
    fused = rrf([(dense, 1.0), (lexical, LEXICAL_WEIGHT)])
    fused[lexical == 0] -= LEXICAL_WEIGHT / (RRF_K + len(lexical))  # no match ranks last
    return fused


def block_max(index: ThreadIndex, row_scores: np.ndarray) -> np.ndarray:
    first, end = index.block_rows
    return np.maximum.reduceat(row_scores, first) if len(first) else np.zeros(0)


def fused_blocks(index: ThreadIndex, dense: np.ndarray, terms: Sequence[str]) -> np.ndarray:
    """Per block: BM25 over the whole block fused with its best message's cosine.

    Block-level BM25 rewards a block that holds all the request's terms (a city and a topic)
    even when no single message holds them all.
    """
    best = block_max(index, dense)
    lexical = index.block_lexical.scores(terms)
    if not lexical.any():
        return rrf([(best, 1.0)])
    return rrf([(best, 1.0), (lexical, 1.0)])


def score_messages(index: ThreadIndex, query: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k messages most similar to the query: (position, cosine), best first."""
    scores, rows = index.vectors.search(query, k)
    return [(index.rows[r], float(s)) for s, r in zip(scores, rows) if r >= 0]


def score_blocks(index: ThreadIndex, query: np.ndarray) -> list[ScoredBlock]:
    """Every block by its best message's cosine alone, best first (a dense-only view, for
    inspection and tests; `blocks` ranks with the ranker: ranker.py)."""
    dense = dense_rows(index, query)
    best = block_max(index, dense)
    first, end = index.block_rows
    order = np.argsort(-best, kind="stable")
    return [ScoredBlock(index.blocks[b], float(best[b]),
                        index.rows[first[b] + int(np.argmax(dense[first[b]:end[b]]))]) for b in order]
