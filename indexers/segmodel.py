"""The learned boundary scorer behind the `time+learned` segmenter.

Each gap between two messages gets a probability that a new topic starts there, from what
the write path already holds: the messages' embeddings (their similarity across the gap over
windows of one to three messages, and the embedding of the messages on each side, which a
linear probe reads as dialogue acts: a request that opens something, a thanks that closes),
the speaker's role, cue phrases (greetings, closings, "anything else?", "by the way") in
English and Japanese, and message length. No LLM and no tokenizer: a gap costs a few dot
products.

A gap is scored once the `lookahead` messages after it have arrived, from messages of the
open block only (never before its first message), so segmenting a thread's open tail decides
as segmenting the whole thread would. The weights are `segmenter.json`, fitted by
`benchmarks/seg_train.py` on tune splits only (the file names its data and licences).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np

from semhist.kernel.errors import ConfigError
from semhist.kernel.model import Block, Message
from semhist.kernel.tokens import count_message
from .segment import TimeGapSegmenter, TopicSegmenter, _blocks

SHIPPED = Path(__file__).with_name("segmenter.json")

# Cue phrases. A greeting opens a conversation; a thanks or a closing ends one; an offer of
# more help ("anything else?") comes just before the user's next request; a shift cue opens a
# new subject inside a conversation.
_GREET = re.compile(r"^\W*(hi|hello|hey|good (morning|afternoon|evening)|greetings|"
                    r"こんにちは|こんばんは|おはよう|はじめまして)\b", re.I)
_THANKS = re.compile(r"(thank|thanks|\bbye\b|goodbye|that'?s all|ありがと|助かり|以上で|失礼します|さようなら)", re.I)
_OFFER = re.compile(r"(anything else|something else|is there anything|help you with|"
                    r"他に|ほかに|その他.*(ございますか|ありますか))", re.I)
_SHIFT = re.compile(r"(\bby the way\b|\banyways?\b|\bbtw\b|\balso\b|\bnow\b|\bi (also )?need\b|"
                    r"\bi(?: am|'m) (also )?looking\b|\bcan you (help|find|tell)\b|"
                    r"ところで|さて|ちなみに|それと|あと|次に|探して|したいのですが|ください)", re.I)

# The hand-made features, in the order the weights read them; the probe's 2 x dim follow.
FEATURES = ("sim1", "sim2", "sim3", "sim_skip", "sim_before", "sim_back", "sim_ahead",
            "user", "user_after_user", "greeting", "thanks_before", "offer_before", "offer_before2",
            "shift_cue", "question", "length", "length_before", "since_start")
# For the ablation (benchmarks/seg_train.py): which features make up each group.
GROUPS = {"similarity": FEATURES[:7], "role": FEATURES[7:9], "cues": FEATURES[9:15],
          "length": FEATURES[15:17], "position": FEATURES[17:], "probe": ("probe",)}


@dataclass(frozen=True)
class Cues:
    """What a gap's features read of one message besides its vector."""

    user: bool
    greeting: bool
    thanks: bool
    offer: bool
    shift: bool
    question: bool
    length: float

    @classmethod
    def of(cls, message: Message) -> Cues:
        text = message.content or ""
        return cls(message.role == "user", bool(_GREET.search(text)), bool(_THANKS.search(text)),
                   bool(_OFFER.search(text)), bool(_SHIFT.search(text)), "?" in text or "？" in text,
                   math.log1p(len(text)))


REACH = 5  # the farthest apart two messages a gap's features compare (lookahead 2)


class Run:
    """The similarities a run of messages' gaps read, computed once per run: each message's
    cosine with the `REACH` messages before it (one vectorized pass), and its cues."""

    def __init__(self, vectors: np.ndarray, cues: Sequence[Cues]):
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        self.unit = np.divide(vectors, norms, out=np.zeros_like(vectors, dtype=np.float64), where=norms > 0)
        n = len(vectors)
        # band[d][i] = cosine(message i, message i + d); band[0][i] is 1 (0 for an empty vector)
        self.band = [np.einsum("ij,ij->i", self.unit[:max(n - d, 0)], self.unit[d:]).tolist()
                     for d in range(REACH + 1)]
        self.cues = list(cues)

    def sim(self, i: int, j: int) -> float:
        return self.band[abs(i - j)][min(i, j)] if abs(i - j) <= REACH else 0.0

    def between(self, a: range, b: range) -> float:
        """Cosine of the mean vector of messages `a` with that of messages `b`."""
        ab = sum(self.sim(i, j) for i in a for j in b)
        aa = sum(self.sim(i, j) for i in a for j in a)
        bb = sum(self.sim(i, j) for i in b for j in b)
        return ab / math.sqrt(aa * bb) if aa > 0 and bb > 0 else 0.0


def hand_row(run: Run, k: int, start: int, end: int) -> list[float]:
    """The hand-made features of the gap before message `k` of a block that began at `start`,
    reading messages `start` .. `end - 1` only: `k + lookahead` and the one before it, or fewer
    where a run of messages ends sooner."""
    c = run.cues

    def span(lo: int, hi: int) -> range:
        return range(max(lo, start), min(hi, end))

    return [run.sim(k - 1, k), run.between(span(k - 2, k), span(k, k + 2)), run.between(span(k - 3, k), span(k, k + 3)),
            run.sim(k - 1, k + 1) if k + 1 < end else run.sim(k - 1, k),
            run.sim(k - 2, k - 1) if k - 2 >= start else 1.0,
            max(run.sim(k, j) for j in range(max(start, k - 4), k)),
            max(run.sim(k - 1, j) for j in range(k, end)),
            c[k].user, c[k].user and c[k - 1].user, c[k].greeting, c[k - 1].thanks, c[k - 1].offer,
            k - 2 >= start and c[k - 2].offer, c[k].shift, c[k].question, c[k].length, c[k - 1].length,
            math.log1p(k - start)]


def gap_row(run: Run, k: int, start: int, end: int) -> np.ndarray:
    """Every feature of a gap as the model reads it: the hand-made ones, then the probe's (the
    unit vectors of message `k` and of the one before it). What seg_train.py fits on."""
    return np.concatenate([np.asarray(hand_row(run, k, start, end), dtype=np.float64),
                           run.unit[k], run.unit[k - 1]])


@dataclass(frozen=True)
class BoundaryModel:
    """A logistic model over `gap_row`: a gap whose probability reaches `threshold` starts a
    block, if the block it closes has at least `min_segment` messages."""

    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: float
    threshold: float
    min_segment: int
    lookahead: int
    dim: int  # of the embeddings the probe reads (0: no probe)
    embedder: str

    def score(self, row: np.ndarray) -> float:
        """The probability of a boundary at a gap, from its full `gap_row` (what training reads)."""
        return _sigmoid(float(((row - self.mean) / self.scale) @ self.weights) + self.bias)

    @cached_property
    def _folded(self) -> tuple[list[float], float, np.ndarray]:
        """The standardization folded into the weights: hand weights, bias, probe matrix."""
        w = self.weights / self.scale
        h = len(FEATURES)
        probe = np.stack([w[h:h + self.dim], w[h + self.dim:]], axis=1) if self.dim else np.zeros((0, 2))
        return w[:h].tolist(), self.bias - float(self.mean @ w), probe

    def scorer(self, run: Run) -> Callable[[int, int, int], float]:
        """score(k, start, end) for every gap of `run`, as `score(gap_row(...))` gives it, with
        the probe's dot products made for the whole run in one matrix product."""
        hand, bias, probe = self._folded
        projected = (run.unit @ probe).tolist() if self.dim else None

        def score(k: int, start: int, end: int) -> float:
            z = bias + sum(a * b for a, b in zip(hand, hand_row(run, k, start, end)))
            if projected is not None:
                z += projected[k][0] + projected[k - 1][1]
            return _sigmoid(z)
        return score

    def check(self, vectors: np.ndarray) -> None:
        if self.dim and vectors.shape[1] != self.dim:
            raise ConfigError(f"the time+learned segmenter reads {self.embedder} vectors ({self.dim} dimensions); "
                              f"this index has {vectors.shape[1]}: use --embedder {self.embedder.split('@')[0]} "
                              "or another --segmenter")

    def to_json(self, **about) -> dict:
        return {**about, "features": [*FEATURES, *(["probe"] if self.dim else [])], "dim": self.dim,
                "embedder": self.embedder, "lookahead": self.lookahead, "threshold": self.threshold,
                "min_segment": self.min_segment, "bias": self.bias, "mean": self.mean.tolist(),
                "scale": self.scale.tolist(), "weights": self.weights.tolist()}

    @classmethod
    def from_json(cls, data: dict) -> BoundaryModel:
        try:
            mean, scale, weights = (np.asarray(data[k], dtype=np.float64) for k in ("mean", "scale", "weights"))
            dim = int(data["dim"])
            if list(data["features"]) != [*FEATURES, *(["probe"] if dim else [])]:
                raise ValueError(f"its features are not this version's ({', '.join(FEATURES)}, probe)")
            if not len(mean) == len(scale) == len(weights) == len(FEATURES) + 2 * dim:
                raise ValueError("mean, scale and weights must each have one value per feature")
            model = cls(mean, scale, weights, float(data["bias"]), float(data["threshold"]),
                        int(data["min_segment"]), int(data["lookahead"]), dim, str(data["embedder"]))
            if not (0 < model.threshold <= 1 and model.min_segment >= 1 and 0 <= model.lookahead <= 2
                    and bool(np.all(scale > 0))):
                raise ValueError("threshold must be in (0, 1], min_segment at least 1, lookahead 0-2, "
                                 "scale positive")
            return model
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"not a segmenter model: {exc}") from None


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z > -60 else 0.0


@lru_cache(maxsize=4)
def load_model(path: str | None = None) -> BoundaryModel:
    """The shipped model, or a user's own fit (`benchmarks/seg_train.py --out`); read once."""
    where = Path(path) if path else SHIPPED
    try:
        return BoundaryModel.from_json(json.loads(where.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:  # ValueError: not JSON, not UTF-8
        raise ConfigError(f"cannot read the segmenter model {where}: {exc}") from None


class LearnedSegmenter(TopicSegmenter):
    """Time gaps plus topic cuts where the learned boundary scorer (`segmodel.py`) reaches its
    threshold, and size cuts as the time-gap segmenter makes them, in one pass left to right.

    A gap is decided once the scorer's lookahead has arrived (or its run of messages has ended
    at a pause), from the open block's messages only; after a size cut the gaps behind it are
    decided again from the new block's start, as the write path does when that block becomes
    the open tail. So the tail decides as the whole thread does, and a closed block is never
    cut again. `model`: a user's own weights (a path), else the shipped ones. `min_tokens`: a
    topic shift starts a block only once the open block holds that many tokens, so short runs
    between pauses stay whole and only pause-free stretches are cut by topic."""

    def __init__(self, gap_seconds: float = 300.0, max_block_tokens: int = 1200,
                 min_block_messages: int = 3, drift_window: int = 2, percentile: float = 70.0,
                 model: str | BoundaryModel | None = None, min_tokens: int = 0):
        super().__init__(gap_seconds, max_block_tokens, min_block_messages, drift_window, percentile)
        self.model = model if isinstance(model, BoundaryModel) else load_model(model)
        self.min_tokens = min_tokens

    def segment(self, messages: Sequence[Message], vectors: np.ndarray | None = None,
                history: Sequence[float] = ()) -> list[Block]:
        if vectors is None:  # nothing to score: pauses and size, as the time-gap segmenter
            return TimeGapSegmenter.segment(self, messages, None)
        self.model.check(vectors)
        why: dict[int, str] = {}
        runs = self._time_runs(messages, why)
        groups = [g for i, run in enumerate(runs)
                  for g in self._cut(messages, run, vectors, why, complete=i + 1 < len(runs))]
        return _blocks(messages, groups, self._parts(groups, vectors, history), why)

    def topic_spans(self, messages, run: list[int], vectors: np.ndarray) -> list[tuple[int, int]]:
        """(start, end) offsets into `run` of its segments (no size limit: what seg_train.py scores)."""
        spans, start = [], 0
        for group in self._cut(messages, run, vectors, {}, complete=False, sized=False):
            spans.append((start, start + len(group)))
            start += len(group)
        return spans

    def _cut(self, messages, run: list[int], vectors: np.ndarray, why: dict[int, str], complete: bool,
             sized: bool = True) -> list[list[int]]:
        model = self.model
        score = model.scorer(Run(vectors[run], [Cues.of(messages[p]) for p in run]))
        tokens = [count_message(messages[p].to_openai()) for p in run] if sized else [0] * len(run)
        groups: list[list[int]] = []
        start, k, size = 0, 1, tokens[0] if run else 0
        while k < len(run):
            end = min(k + model.lookahead + 1, len(run))
            if k + model.lookahead >= len(run) and not complete:
                break  # not settled: the rest stays the open block
            p = score(k, start, end) if (k - start >= model.min_segment and self._cuttable(messages, run[k])
                                         and (not sized or size >= self.min_tokens)) else 0.0
            if p and p >= model.threshold:
                why[run[k]] = f"topic:{p:.2f}"
                groups.append(run[start:k])
                start, size, k = k, tokens[k], k + 1
                continue
            size += tokens[k]
            cut = self._best_cut(messages, run, vectors, start, k) if size > self.max_block_tokens else None
            if cut is not None:
                why[run[cut]] = "size"
                groups.append(run[start:cut])
                start, size, k = cut, tokens[cut], cut + 1  # decide its gaps again from its own start
                continue
            k += 1
        groups.append(run[start:])
        return [g for g in groups if g]
