"""Per-message ranking features: what the learned ranker reads (ranker.py).

One row of features per message row of a ThreadIndex, for one request, from the signals the
pipeline already computes: BM25 and dense scores and ranks, their rank fusion, the block's
best of each, term cover, mentions of the request's thing, a named author speaking, named
time, position, length, the neighbours of strong hits and question/answer pairs.
benchmarks/ltr_features.py writes these rows for training and evaluation.

Every feature is a plain number whose scale does not depend on the thread's length where that
can be helped (ranks are logged, BM25 is logged and also given relative to the request's best),
so one set of weights serves a 400-message conversation and a merged thread of 6,000.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from semhist.indexers.index.thread_index import ThreadIndex
from semhist.kernel.model import Message

from .candidates import time_candidates
from .keyword import KeywordResult
from .mentions import cover_blocks, mention_rows
from .search import AuthorTerms, author_blocks, block_max, fused_blocks, fused_rows, named_authors, searched_terms

# Feature groups: an ablation drops a whole group (a signal is rarely one column).
GROUPS: dict[str, tuple[str, ...]] = {
    "lexical": ("bm25", "bm25_rel", "bm25_rank", "bm25_zero"),
    "dense": ("cos", "cos_gap", "dense_rank"),
    "fused": ("rrf", "rrf_rank"),
    "block": ("blk_bm25", "blk_cos", "blk_fused", "blk_rank", "blk_rrf"),
    "cover": ("cover", "blk_cover", "mention", "cover_top"),
    "author": ("author_row", "author_blk"),
    "recency": ("recency",),
    "length": ("length",),
    "neighbours": ("nb_rrf", "nb_rank", "prev_rrf", "next_rrf"),
    "dialogue": ("is_question", "answers_hit", "answers_qhit"),
    "time": ("time_in", "time_conv"),
}
NAMES: tuple[str, ...] = tuple(n for g in GROUPS.values() for n in g)

NEIGHBOURS = 2  # rows each side, within the block, whose best fused score a row sees
TOP_HITS = 10  # "a hit": one of this many best rows by fused rank (its reply is the answer)


@dataclass(frozen=True)
class RequestRows:
    """Features of every row for one request, and the scores today's ranking orders by."""

    features: np.ndarray  # (rows, len(NAMES)) float32
    fused: np.ndarray  # fused_rows: dense and BM25 ranks fused (the `fused` ranker)
    lexical: np.ndarray  # BM25 of the searched terms
    dense: np.ndarray  # cosine


def _log_rank(scores: np.ndarray) -> np.ndarray:
    """log(rank) with rank 1 for the best (stable: ties keep row order)."""
    order = np.argsort(-scores, kind="stable")
    ranks = np.empty(len(scores), dtype=np.float64)
    ranks[order] = np.arange(1, len(scores) + 1)
    return np.log(ranks)


def _window_max(values: np.ndarray, index: ThreadIndex, width: int) -> np.ndarray:
    """Per row, the largest of `values` within `width` rows each side in the same block, itself
    left out (-inf where the block has no other row)."""
    n = len(values)
    block = np.asarray(index.row_block)
    out = np.full(n, -np.inf)
    for d in range(1, width + 1):
        for shift in (d, -d):
            src = np.arange(n) + shift
            ok = (src >= 0) & (src < n)
            ok[ok] &= block[src[ok]] == block[ok]
            out[ok] = np.maximum(out[ok], values[src[ok]])
    return out


def _adjacent(values: np.ndarray, shift: int) -> np.ndarray:
    """values of the row `shift` away (0 past either end)."""
    out = np.zeros(len(values))
    if shift > 0:
        out[:-shift] = values[shift:]
    else:
        out[-shift:] = values[:shift]
    return out


class ThreadRows:
    """What the features read of the messages whatever the request, kept as messages arrive
    (ThreadIndex.derived): whether each one asks something, and whether it answers the message
    before it (someone else wrote it). An append costs what it appends (the arrays grow by
    doubling); nothing is counted per request."""

    def __init__(self) -> None:
        self._flags = np.zeros((64, 2), dtype=bool)  # by position: asks, replies
        self._n = 0
        self._last: str | None = None

    def extend(self, messages: Sequence[Message], start: int) -> None:
        if len(messages) > len(self._flags):
            grown = np.zeros((max(len(messages), 2 * len(self._flags)), 2), dtype=bool)
            grown[:self._n] = self._flags[:self._n]
            self._flags = grown
        for pos in range(start, len(messages)):
            m = messages[pos]
            if m.role == "system":  # no row (ThreadIndex._add_rows): it answers nobody
                continue
            who, text = m.name or m.role, m.content
            self._flags[pos] = ("?" in text or "？" in text, self._last is not None and who != self._last)
            self._last = who
        self._n = len(messages)

    def value(self, index: ThreadIndex) -> tuple[np.ndarray, np.ndarray]:
        """(asks, replies), one flag a row."""
        flags = self._flags[np.asarray(index.rows, dtype=np.int64)]
        return flags[:, 0], flags[:, 1]


def request_rows(index: ThreadIndex, plan: KeywordResult, dense: np.ndarray, gap_seconds: float) -> RequestRows:
    """The features of every row of `index` for the request `plan` (its query's cosines `dense`)."""
    n = len(index.rows)
    asks, replies = index.derived("ranking rows", ThreadRows)
    terms = searched_terms(index, plan.terms)
    lexical = index.lexical.scores(terms).astype(np.float64)
    fused = fused_rows(index, dense, terms, lexical)
    authors = author_blocks(index, plan.terms)
    block = np.asarray(index.row_block)
    f: dict[str, np.ndarray] = {}

    top = lexical.max() if n else 0.0
    f["bm25"] = np.log1p(lexical)
    f["bm25_rel"] = lexical / top if top > 0 else np.zeros(n)
    f["bm25_rank"] = np.where(lexical > 0, _log_rank(lexical), np.log(max(n, 1)))
    f["bm25_zero"] = (lexical == 0).astype(np.float64)

    f["cos"] = dense.astype(np.float64)
    f["cos_gap"] = float(dense.max()) - dense if n else np.zeros(0)
    f["dense_rank"] = _log_rank(dense)

    f["rrf"] = fused
    f["rrf_rank"] = _log_rank(fused)

    blocks = fused_blocks(index, dense, terms)
    f["blk_bm25"] = np.log1p(index.block_lexical.scores(terms))[block]
    f["blk_cos"] = block_max(index, dense)[block]
    f["blk_fused"] = blocks[block]
    f["blk_rank"] = _log_rank(blocks)[block]
    f["blk_rrf"] = block_max(index, fused)[block]

    distinct = set(terms)
    if distinct:
        f["cover"] = index.lexical.coverage(distinct) / len(distinct)
        f["blk_cover"] = (index.block_lexical.coverage(distinct) / len(distinct))[block]
    else:
        f["cover"] = f["blk_cover"] = np.zeros(n)
    mentioned = mention_rows(index, terms)
    f["mention"] = mentioned.astype(np.float64) if mentioned is not None else np.zeros(n)
    cover = cover_blocks(index, terms)
    f["cover_top"] = cover[block].astype(np.float64) if cover is not None else np.zeros(n)

    names = named_authors(index, plan.terms)
    spoken = index.derived("author terms", AuthorTerms).rows_by(index, names) if names else None
    f["author_row"] = spoken.astype(np.float64) if spoken is not None else np.zeros(n)
    f["author_blk"] = authors[block].astype(np.float64) if authors is not None else np.zeros(n)

    f["recency"] = np.log1p(np.arange(n - 1, -1, -1, dtype=np.float64))
    tokens = np.asarray(index.tokens, dtype=np.int64)[np.asarray(index.rows, dtype=np.int64)]
    f["length"] = np.log(np.maximum(tokens, 1))  # as stored: nothing is counted per request

    ranks = f["rrf_rank"]
    near = _window_max(fused, index, NEIGHBOURS)
    f["nb_rrf"] = np.where(np.isfinite(near), near, 0.0)
    near_rank = -_window_max(-ranks, index, NEIGHBOURS)
    f["nb_rank"] = np.where(np.isfinite(near_rank), near_rank, np.log(max(n, 1)))
    f["prev_rrf"], f["next_rrf"] = _adjacent(fused, -1), _adjacent(fused, 1)

    question = asks.astype(np.float64)
    hit = ranks < np.log(TOP_HITS + 0.5)
    # the answer to a hit: the next row, by someone else
    prev_hit = _adjacent(hit.astype(np.float64), -1) > 0
    prev_question = _adjacent(question, -1) > 0
    f["is_question"] = question
    f["answers_hit"] = (prev_hit & replies).astype(np.float64)
    f["answers_qhit"] = (prev_hit & replies & prev_question).astype(np.float64)

    f["time_in"], f["time_conv"] = _named_time(index, plan, gap_seconds)

    features = np.stack([np.asarray(f[name], dtype=np.float64) for name in NAMES], axis=1).astype(np.float32)
    return RequestRows(features, fused, lexical, dense)


def _named_time(index: ThreadIndex, plan: KeywordResult, gap_seconds: float) -> tuple[np.ndarray, np.ndarray]:
    """Rows stamped within the time the request names, and rows of the conversations that
    `blocks` takes first for it (named_time.in_range, each one's longest alternative)."""
    n = len(index.rows)
    span = plan.time_range
    if span is None:
        return np.zeros(n), np.zeros(n)
    stamped = np.array([span.contains(index.messages[p].timestamp) for p in index.rows], dtype=np.float64)
    row_of = {p: r for r, p in enumerate(index.rows)}
    taken = np.zeros(n)
    for alternatives, *_ in time_candidates(index.thread, index, plan, gap_seconds):
        for p in next(iter(alternatives), ()):
            if p in row_of:
                taken[row_of[p]] = 1.0
    return stamped, taken


def group_columns(drop: Sequence[str] = ()) -> list[int]:
    """Column numbers of NAMES without the groups `drop`."""
    gone = {n for g in drop for n in GROUPS[g]}
    return [i for i, n in enumerate(NAMES) if n not in gone]
