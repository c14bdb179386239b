"""Segmentation: group consecutive messages into blocks that are retrieved as a unit.

Both segmenters work left to right and only ever revise the open tail (the block still
growing at the end of the thread), so a new message never re-segments closed history.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from semhist.kernel.errors import ConfigError
from semhist.kernel.model import Block, Message
from semhist.kernel.tokens import count_message


# Drift values a thread must have shown before its own percentile is trusted for cutting.
MIN_HISTORY = 8
# How much of the thread's drift so far the percentile looks at (a store keeps this much).
HISTORY = 512


# A user message that ends a conversation with an assistant: thanks or "that's all" at its end,
# short. A history without timestamps (imported, or from a client that drops them) has no
# pauses at all: this is where one conversation ends.
_CLOSING = re.compile(
    r"(ありがとう(ございました|ございます)?|以上です|以上で(終わります|す)|大丈夫です|特にありません|失礼します|"
    r"さようなら|お疲れ様でした|\bthanks?( you)?( so much)?|that'?s all|\bbye\b|goodbye|\bcheers\b)"
    r"[\s。．.!！~〜]*$", re.I)
CLOSING_CHARS = 60


def closes(text: str) -> bool:
    return len(text) <= CLOSING_CHARS and bool(_CLOSING.search(text.strip()))


class Segmenter(Protocol):
    """Splits messages into blocks; `vectors[i]` is the embedding of `messages[i]` (optional).

    Block message ids are positions in `messages`; system messages are never in a block.
    `history` is the drift the thread showed in the blocks before `messages` (see
    `drift_history`), so that segmenting a thread's open tail decides as segmenting the
    whole thread would.
    """

    drift_window: int

    def segment(self, messages: Sequence[Message], vectors: np.ndarray | None = None,
                history: Sequence[float] = ()) -> list[Block]: ...


class RecentDrift:
    """The thread's latest `size` drift values, kept sorted too, so the percentile each step
    reads is a lookup, not a sort; it equals numpy's default (linear) percentile exactly."""

    def __init__(self, history: Sequence[float] = (), size: int = HISTORY):
        self.size = size
        self._order: deque[float] = deque(list(history)[-size:])
        self._sorted = sorted(self._order)

    def threshold(self, percentile: float) -> float:
        """The percentile of the values so far (infinite until MIN_HISTORY were seen)."""
        values, n = self._sorted, len(self._sorted)
        if n < MIN_HISTORY:
            return math.inf
        virtual = (n - 1) * (percentile / 100.0)
        lo = math.floor(virtual)
        t, a, b = virtual - lo, values[lo], values[min(lo + 1, n - 1)]
        return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t

    def push(self, value: float) -> None:
        self._order.append(value)
        insort(self._sorted, value)
        if len(self._order) > self.size:
            del self._sorted[bisect_left(self._sorted, self._order.popleft())]


def drift(vectors: np.ndarray, window: int) -> np.ndarray:
    """drift[i] = 1 - cosine(mean of the `window` vectors before i, mean of those from i on).

    drift[0] is 0. Window means come from cumulative sums, so this is O(n).
    """
    n = len(vectors)
    out = np.zeros(n, dtype=np.float32)
    if n < 2:
        return out
    csum = np.vstack([np.zeros((1, vectors.shape[1]), dtype=np.float64), np.cumsum(vectors, axis=0, dtype=np.float64)])
    idx = np.arange(1, n)
    left = csum[idx] - csum[np.maximum(0, idx - window)]
    right = csum[np.minimum(n, idx + window)] - csum[idx]
    norms = np.linalg.norm(left, axis=1) * np.linalg.norm(right, axis=1)
    out[1:] = 1.0 - np.einsum("ij,ij->i", left, right) / np.maximum(norms, 1e-12)
    return out


class TimeGapSegmenter:
    """A pause longer than `gap_seconds` starts a block.

    A block that would grow past `max_block_tokens` is cut where the topic drifts most
    within it (by embedding drift when vectors are given, else at the size limit), keeping
    at least `min_block_messages` on the closed side. A tool result never leaves its call.
    Messages without timestamps are grouped by size (and drift) alone.
    """

    def __init__(self, gap_seconds: float = 300.0, max_block_tokens: int = 1200,
                 min_block_messages: int = 3, drift_window: int = 2, percentile: float = 70.0):
        self.gap_seconds = gap_seconds
        self.max_block_tokens = max_block_tokens
        self.min_block_messages = min_block_messages
        self.drift_window = drift_window
        self.percentile = percentile

    def segment(self, messages: Sequence[Message], vectors: np.ndarray | None = None,
                history: Sequence[float] = ()) -> list[Block]:
        groups: list[list[int]] = []
        why: dict[int, str] = {}
        for run in self._time_runs(messages, why):
            groups.extend(self._split_run(messages, run, vectors, why))
        parts = self._parts(groups, vectors, history) if vectors is not None else None
        return _blocks(messages, groups, parts, why)

    def _parts(self, groups: list[list[int]], vectors: np.ndarray,
               history: Sequence[float] = ()) -> list[tuple[int, ...]]:
        """Topic sub-segments inside each block: cuts at drift peaks above the `percentile`
        of the drift seen earlier in the thread (so closed blocks never change). Retrieval
        takes a sub-segment when its whole block does not fit the budget."""
        seen = RecentDrift(history)
        out = []
        for ids in groups:
            scores = drift(vectors[ids], self.drift_window)
            cuts = [0]
            for k in range(1, len(ids)):
                threshold = seen.threshold(self.percentile)
                seen.push(float(scores[k]))
                peak = scores[k] >= scores[k - 1] and (k + 1 >= len(ids) or scores[k] >= scores[k + 1])
                if (peak and scores[k] >= threshold and k - cuts[-1] >= self.min_block_messages
                        and len(ids) - k >= self.min_block_messages):
                    cuts.append(k)
            out.append(tuple(cuts))
        return out

    def _time_runs(self, messages: Sequence[Message], why: dict[int, str] | None = None) -> list[list[int]]:
        """Runs of messages without a pause. Where messages carry no time, a user's closing
        ("ありがとうございました", "thanks, that's all") ends a run at the user's next request.
        With times, the pause decides: a closing inside a session is often followed by
        the next request of the same conversation (JMultiWOZ recall at 10% fell 0.898 -> 0.884
        when closings cut timed runs too)."""
        runs: list[list[int]] = []
        previous: Message | None = None
        closed = False
        for pos, msg in enumerate(messages):
            if msg.role == "system":
                continue
            ends = msg.role == "user" and msg.timestamp is None and closes(msg.content)
            if not runs or (msg.role != "tool" and self._gap(previous, msg)) or (
                    closed and msg.role == "user" and msg.timestamp is None and not ends):
                if runs and why is not None:
                    why[pos] = self._pause(previous, msg) or "closing"
                runs.append([])
                closed = False
            runs[-1].append(pos)
            closed = closed or ends
            previous = msg
        return runs

    def _pause(self, previous: Message | None, msg: Message) -> str:
        """`pause:SECONDS` when a pause starts a block here, else ''."""
        return f"pause:{(msg.timestamp - previous.timestamp).total_seconds():.0f}" \
            if self._gap(previous, msg) and previous and previous.timestamp and msg.timestamp else ""

    def _gap(self, previous: Message | None, msg: Message) -> bool:
        if previous is None or previous.timestamp is None or msg.timestamp is None:
            return False
        return (msg.timestamp - previous.timestamp).total_seconds() > self.gap_seconds

    def _cuttable(self, messages: Sequence[Message], pos: int) -> bool:
        return messages[pos].role != "tool"

    def _split_run(self, messages, run: list[int], vectors, why: dict[int, str]) -> list[list[int]]:
        """Left to right: when the open block outgrows the limit, close it at its best cut."""
        groups: list[list[int]] = []
        start, size = 0, 0
        for k, pos in enumerate(run):
            size += count_message(messages[pos].to_openai())
            if size <= self.max_block_tokens or k - start < 1:
                continue
            cut = self._best_cut(messages, run, vectors, start, k)
            if cut is None:  # nowhere to cut without separating a tool result: keep growing
                continue
            groups.append(run[start:cut])
            start = cut
            why[run[cut]] = "size"
            size = sum(count_message(messages[p].to_openai()) for p in run[start:k + 1])
        groups.append(run[start:])
        return [g for g in groups if g]

    def _best_cut(self, messages, run, vectors, start: int, end: int) -> int | None:
        """Where to close run[start:end+1]: the highest-drift cuttable point, if any.

        Drift is measured on the open block alone, so the decision never depends on
        messages that had not arrived yet when the block overflowed.
        """
        lo = start + min(self.min_block_messages, end - start)
        candidates = [c for c in range(lo, end + 1) if self._cuttable(messages, run[c])]
        if not candidates:
            return None
        if vectors is None:
            return candidates[-1]
        scores = drift(vectors[run[start:end + 1]], self.drift_window)
        return max(candidates, key=lambda c: (scores[c - start], c))


class TopicSegmenter(TimeGapSegmenter):
    """Time gaps plus cuts where the topic drifts: a local drift peak above the `percentile`
    of the thread's own recent drift (no fixed cosine), blocks of at least
    `min_block_messages`, and the size limit of the time-gap segmenter."""

    def __init__(self, gap_seconds: float = 300.0, max_block_tokens: int = 1200,
                 min_block_messages: int = 3, drift_window: int = 2, percentile: float = 90.0,
                 history: int = 512):
        super().__init__(gap_seconds, max_block_tokens, min_block_messages, drift_window, percentile)
        self.history = history

    def segment(self, messages: Sequence[Message], vectors: np.ndarray | None = None,
                history: Sequence[float] = ()) -> list[Block]:
        if vectors is None:
            return super().segment(messages, None)
        # the thread's drift so far: thresholds adapt to each thread. A stored thread's open
        # tail starts this over (only the sub-segments' history is kept with the thread).
        seen = RecentDrift(size=self.history)
        groups: list[list[int]] = []
        why: dict[int, str] = {}
        for run in self._time_runs(messages, why):
            for topic in self._topic_cuts(messages, run, vectors, seen, why):
                groups.extend(self._split_run(messages, topic, vectors, why))
        return _blocks(messages, groups, self._parts(groups, vectors, history), why)

    def _topic_cuts(self, messages, run: list[int], vectors: np.ndarray, seen: RecentDrift,
                    why: dict[int, str]) -> list[list[int]]:
        scores = drift(vectors[run], self.drift_window)
        groups: list[list[int]] = []
        start = 0
        for k in range(1, len(run)):
            threshold = seen.threshold(self.percentile)
            seen.push(float(scores[k]))
            peak = scores[k] >= scores[k - 1] and (k + 1 >= len(run) or scores[k] >= scores[k + 1])
            settled = k + 1 + self.drift_window <= len(run)  # the peak test has all it reads
            if (settled and peak and scores[k] >= threshold and k - start >= self.min_block_messages
                    and self._cuttable(messages, run[k])):
                groups.append(run[start:k])
                start = k
                why[run[k]] = f"drift:{scores[k]:.2f}"
        groups.append(run[start:])
        return groups


def window_similarity(vectors: np.ndarray, window: int) -> np.ndarray:
    """sim[i] = cosine(mean of the `window` vectors before i, mean of those from i on); 1 at 0."""
    return 1.0 - drift(vectors, window)


def depth_at(sim: np.ndarray, k: int, reach: int) -> float:
    """TextTiling's depth score (Hearst 1997) of the gap before message k: how far sim[k]
    lies below the highest similarity climbed to on each side, at most `reach` gaps away."""
    left = right = sim[k]
    for i in range(k - 1, max(0, k - reach - 1), -1):
        if i < 1 or sim[i] < left:
            break
        left = sim[i]
    for i in range(k + 1, min(len(sim), k + reach + 1)):
        if sim[i] < right:
            break
        right = sim[i]
    return float(left + right - 2 * sim[k])


class TilingSegmenter(TopicSegmenter):
    """Time gaps plus topic cuts by TextTiling over embeddings: the similarity of the
    `TILING_WINDOW` messages before and after each gap, cut in its valleys whose depth is above
    the `percentile` of the depths seen so far in the thread. A gap is decided once the
    messages its depth reads have all arrived, so a closed block is never cut again.

    Measured (benchmarks/limits.md): its blocks reach Pk 0.391 against JMultiWOZ's topic
    boundaries without timestamps (time-gap blocks 0.424, no cut 0.461), but retrieval there
    lost at 10% and 25% (topic blocks are smaller than the conversations a request asks for):
    an option, not the default.
    """

    WINDOW, REACH = 4, 2

    def _topic_cuts(self, messages, run: list[int], vectors: np.ndarray, seen: RecentDrift,
                    why: dict[int, str]) -> list[list[int]]:
        sim = window_similarity(vectors[run], self.WINDOW)
        groups: list[list[int]] = []
        start = 0
        for k in range(1, len(run) - self.WINDOW - self.REACH + 1):  # the settled gaps
            depth = depth_at(sim, k, self.REACH)
            threshold = seen.threshold(self.percentile)
            seen.push(depth)
            valley = sim[k] <= sim[k - 1] and sim[k] <= sim[k + 1]
            if (valley and depth > 0 and depth >= threshold and k - start >= self.min_block_messages
                    and self._cuttable(messages, run[k])):
                groups.append(run[start:k])
                start = k
                why[run[k]] = f"depth:{depth:.2f}"
        groups.append(run[start:])
        return groups


def drift_history(history: Sequence[float], vectors: np.ndarray | None, groups: Sequence[Sequence[int]],
                  window: int) -> tuple[float, ...]:
    """The drift history after `groups` (message positions per block, in order): what the
    next call to `segment` must be given to continue the thread's sub-segments."""
    if vectors is None:
        return tuple(history)
    seen = list(history)
    for ids in groups:
        seen.extend(float(x) for x in drift(vectors[list(ids)], window)[1:])
    return tuple(seen[-HISTORY:])


def _blocks(messages: Sequence[Message], groups: list[list[int]],
            parts: list[tuple[int, ...]] | None = None, why: dict[int, str] | None = None) -> list[Block]:
    """`why`: what started the block at a position (Block.cause); the first block's cause
    lies before these messages."""
    return [
        Block(i, tuple(ids), messages[ids[0]].timestamp, messages[ids[-1]].timestamp,
              sum(count_message(messages[p].to_openai()) for p in ids), parts[i] if parts else (0,),
              (why or {}).get(ids[0], "") if i else "")
        for i, ids in enumerate(groups)
    ]


def _learned(**params) -> Segmenter:
    from .segmodel import LearnedSegmenter  # it builds on the segmenters here

    return LearnedSegmenter(**params)


SEGMENTERS: dict[str, Callable[..., Segmenter]] = {
    "time-gap": TimeGapSegmenter,
    "time+topic": TopicSegmenter,
    "time+tiling": TilingSegmenter,
    "time+learned": _learned,
}


def get_segmenter(name: str, **params) -> Segmenter:
    try:
        factory = SEGMENTERS[name]
    except KeyError:
        raise ConfigError(f"unknown segmenter {name!r}; valid: {', '.join(sorted(SEGMENTERS))}") from None
    return factory(**params)
