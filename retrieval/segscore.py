"""`semhist eval FILE --segmentation`: the configured segmenter's cuts against the human topic
boundaries of a file (`topic_segments`), as Pk and WindowDiff, beside simple baselines.

The cuts are the ones retrieval searches by: each thread goes through the same path as an
`ask` (stored, embedded, segmented online, a closed block never cut again), and a retrieval unit
starts at each block and at each topic sub-segment inside one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from semhist.indexers.loader import open_text
from semhist.kernel.errors import InputError
from semhist.kernel.model import Thread

from .engine import Engine


def _labels(starts: Iterable[int], n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.int64)
    for s in sorted(set(starts)):
        if 0 < s < n:
            out[s:] += 1
    return out


def pk_window_diff(reference: Sequence[int], hypothesis: Sequence[int], n: int,
                   min_k: int = 1) -> tuple[float, float]:
    """Pk (Beeferman et al. 1999) and WindowDiff (Pevzner & Hearst 2002) of one thread of `n`
    messages; segments given by their start positions; k is half the mean reference segment
    length, at least `min_k` (2 in SuperDialseg's scorer, which published DialSeg711 and TIAGE
    figures use: with 1, a TIAGE chat's k is often 1 and leaving it uncut scores well).
    Lower is better; 0 is a perfect match."""
    k = max(min_k, round(n / (2 * max(1, len(set(reference))))))
    if n <= k:
        return 0.0, 0.0
    r, h = _labels(reference, n), _labels(hypothesis, n)
    pk = float(np.mean((r[:-k] == r[k:]) != (h[:-k] == h[k:])))
    wd = float(np.mean((r[k:] - r[:-k]) != (h[k:] - h[:-k])))
    return pk, wd


def boundary_f1(reference: Sequence[int], hypothesis: Sequence[int]) -> float:
    """F1 of the boundaries found at exactly the right place (the start of a thread is not one)."""
    ref, hyp = set(reference) - {0}, set(hypothesis) - {0}
    if not ref and not hyp:
        return 1.0
    hits = len(ref & hyp)
    return 2 * hits / (len(ref) + len(hyp))


def gold_starts(path: str | Path) -> dict[str, list[int]]:
    """Each thread's human segment starts, from the `topic_segments` ([start, end, label],
    half-open over `messages`) of a JSON Lines benchmark file; threads without them are left out.
    The loader keeps no annotations (they must never reach retrieval), so they are read here."""
    out: dict[str, list[int]] = {}
    with open_text(path) as f:  # compressed too, as the loader reads it
        for line in f:
            try:
                row = json.loads(line) if line.strip() else None
            except json.JSONDecodeError:
                continue  # the loader has said what is wrong with it
            segments = row.get("topic_segments") if isinstance(row, dict) else None
            if isinstance(segments, list) and segments and isinstance(row.get("id"), str):
                try:
                    out[row["id"]] = sorted({int(s[0]) for s in segments})
                except (TypeError, ValueError, IndexError) as exc:
                    raise InputError(f"thread {row['id']}: topic_segments must be [start, end, label] lists") from exc
    return out


def _fixed(size: int) -> Callable[[int], list[int]]:
    return lambda n: list(range(0, n, size))


BASELINES: dict[str, Callable[[int], list[int]]] = {
    "no cut": lambda n: [0],
    "fixed 3 messages": _fixed(3),
    "fixed 6 messages": _fixed(6),
}


def _cuts(engine: Engine, thread: Thread) -> tuple[list[int], list[int], int]:
    """(unit starts, block starts, messages) of the thread as retrieval segments it, in the
    file's message positions."""
    blocks = engine.index(thread).blocks  # positions in the thread as loaded (searched whole)
    where = [m.index for m in thread.messages]  # ...and in the file, skipped messages (--lenient) counted
    units = sorted({where[b.message_ids[o]] for b in blocks for o in b.parts})
    whole = sorted({where[b.message_ids[0]] for b in blocks})
    return units, whole, max(where, default=-1) + 1


def evaluate_segmentation(engine: Engine, threads: Sequence[Thread], gold: dict[str, list[int]], *,
                          dataset: str = "", on_thread: Callable[[], None] | None = None) -> dict:
    """The report `semhist eval --segmentation --json` prints: mean Pk and WindowDiff over the
    threads that have gold boundaries, for the configured segmenter and the baselines."""
    scored = [t for t in threads if gold.get(t.id)]
    if not scored:
        raise InputError(f"{dataset or 'the file'} has no thread with topic_segments: --segmentation needs "
                         "human topic boundaries ([start, end, label] ranges over messages)")
    ours: list[tuple[float, float]] = []
    blocks_only: list[tuple[float, float]] = []
    base: dict[str, list[tuple[float, float]]] = {name: [] for name in BASELINES}
    for thread in scored:
        units, whole, n = _cuts(engine, thread)
        reference = gold[thread.id]
        ours.append(pk_window_diff(reference, units, n))
        blocks_only.append(pk_window_diff(reference, whole, n))
        for name, cut in BASELINES.items():
            base[name].append(pk_window_diff(reference, cut(n), n))
        if on_thread:
            on_thread()

    def mean(pairs: list[tuple[float, float]]) -> dict[str, float]:
        return {"pk": round(float(np.mean([p for p, _ in pairs])), 4),
                "window_diff": round(float(np.mean([w for _, w in pairs])), 4)}

    settings = engine.settings
    return {"dataset": dataset,
            "segmentation": {"segmenter": settings.segmenter, **mean(ours), "n_threads": len(scored),
                             "params": settings.segment_params,
                             "baselines": {**{name: mean(v) for name, v in base.items()},
                                           "blocks without sub-segments": mean(blocks_only)}}}
