"""Fit the learned boundary scorer of the `time+learned` segmenter (issue 55).

    python benchmarks/seg_train.py                          # dev figures and the ablation, /tmp/seg
    python benchmarks/seg_train.py --out indexers           # ... and the weights that ship

Fitted on tune splits only: TIAGE `train` (MIT) and JMultiWOZ threads 0-26 (CC BY-SA 4.0), their
timestamps squeezed to a second apart (a pause is the time-gap rule's job; the scorer learns what
a topic shift looks like). Chosen on dev: TIAGE `dev` and JMultiWOZ threads 27-35 (the rest of
its tune half). Nothing held (JMultiWOZ 36+, TIAGE test, DialSeg711) reaches a fit or a choice:
benchmarks/segmentation.py reports those. No LoCoMo (CC BY-NC 4.0).

Each gap's row is `semhist.indexers.segmodel.gap_row`, read from the block the gold segmentation
has open there (teacher forcing); a logistic loss, weighted so each set counts the same, plus L2.
The L2 strength, the threshold and the shortest segment are chosen by mean Pk on the dev sets,
decoding exactly as the segmenter does; the weights that ship are then fitted again on the fit
and dev sets together with those choices (`--no-refit`: the fit-only weights). Writes
DIR/segmenter.json and DIR/seg_train.md (the dev figures of the fit-only weights, and the
ablation: each feature group left out, refitted and chosen again).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from semhist import Engine
from semhist.indexers.segmodel import LearnedSegmenter
from semhist.indexers.segmodel import FEATURES, GROUPS, BoundaryModel, Cues, Run, gap_row
from semhist.kernel.model import embedding_text
from semhist.kernel.settings import Settings
from semhist.segscore import boundary_f1, pk_window_diff

from common import add_data, add_out, data_file, table
from seg_data import TUNE_THREADS, Labelled, from_jsonl, squeezed

FIT_THREADS = 27  # JMultiWOZ threads fitted on; 27 .. TUNE_THREADS-1 choose
FIT = ("tiage train", "jmultiwoz 0-26")
DEV = ("tiage dev", "jmultiwoz 27-35")
LOOKAHEAD = 2
L2S = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2)
THRESHOLDS = tuple(round(t, 2) for t in np.arange(0.2, 0.81, 0.05))
MIN_SEGMENTS = (1, 2, 3)
LICENCE = ("CC BY-SA 4.0 (creativecommons.org/licenses/by-sa/4.0), as the data it was fitted on: JMultiWOZ "
           "(Ohashi et al., LREC-COLING 2024, github.com/nu-dialogue/jmultiwoz, CC BY-SA 4.0) and TIAGE "
           "(Xie et al., Findings of EMNLP 2021, github.com/HuiyuanXie/tiage, MIT)")


def sets(limit: int | None) -> dict[str, list[Labelled]]:
    tiage, jmw = data_file("tiage.jsonl"), data_file("jmultiwoz_threads.jsonl")
    threads = [squeezed(t) for t in from_jsonl(jmw)[:TUNE_THREADS]]
    out = {"tiage train": from_jsonl(tiage, "train"), "jmultiwoz 0-26": threads[:FIT_THREADS],
           "tiage dev": from_jsonl(tiage, "dev"), "jmultiwoz 27-35": threads[FIT_THREADS:]}
    return {k: v[:limit] for k, v in out.items()}


def rows(item: Labelled, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every settled gap of a thread (a tool result never starts a block), read from the block
    the gold segmentation has open there, and whether a segment starts at it."""
    run = Run(vectors, [Cues.of(m) for m in item.messages])
    starts = set(item.starts)
    x, y, start = [], [], 0
    for k in range(1, len(item.messages) - LOOKAHEAD):
        if item.messages[k].role != "tool":
            x.append(gap_row(run, k, start, k + LOOKAHEAD + 1))
            y.append(float(k in starts))
        if k in starts:
            start = k
    return np.asarray(x), np.asarray(y)


def fit(x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float, steps: int = 1500) -> tuple[np.ndarray, float]:
    """Weighted logistic regression with L2 (not on the bias), by Nesterov's accelerated
    gradient on the standardized rows: convex, so the same data gives the same weights."""
    n, d = x.shape
    theta = np.zeros(d + 1)
    velocity = np.zeros(d + 1)
    lr = 0.5 / (0.25 * np.mean(np.sum(x * x, axis=1)) + l2 + 1.0)
    for _ in range(steps):
        ahead = theta + 0.9 * velocity
        p = 1 / (1 + np.exp(-np.clip(x @ ahead[:-1] + ahead[-1], -30, 30)))
        g = w * (p - y)
        grad = np.append(x.T @ g / n + l2 * ahead[:-1], g.mean())
        velocity = 0.9 * velocity - lr * grad
        theta = theta + velocity
    return theta[:-1], float(theta[-1])


def score(model: BoundaryModel, data: list[tuple[Labelled, np.ndarray]]) -> tuple[float, float, float, float]:
    """Mean Pk (k >= 2), WindowDiff, boundary F1 and Pk (k >= 1) of the segmenter's topic cuts."""
    segmenter = LearnedSegmenter(model=model)
    out = []
    for item, vectors in data:
        run = list(range(len(item.messages)))
        hyp = [a for a, _ in segmenter.topic_spans(item.messages, run, vectors)]
        n = len(run)
        out.append((*pk_window_diff(item.starts, hyp, n, 2), boundary_f1(item.starts, hyp),
                    pk_window_diff(item.starts, hyp, n)[0]))
    return tuple(float(v) for v in np.mean(out, axis=0))  # type: ignore[return-value]


class Trainer:
    def __init__(self, data: dict[str, list[tuple[Labelled, np.ndarray]]], embedder: str):
        self.data, self.embedder = data, embedder
        self.rows = {name: [rows(item, v) for item, v in threads] for name, threads in data.items()}

    def model(self, columns: np.ndarray, l2: float, fitted: tuple[str, ...] = FIT) -> BoundaryModel:
        """Fitted on `fitted` with the features in `columns` (the others weigh 0)."""
        x = np.vstack([r[0] for s in fitted for r in self.rows[s]])
        y = np.concatenate([r[1] for s in fitted for r in self.rows[s]])
        per_set = [sum(len(r[1]) for r in self.rows[s]) for s in fitted]
        w = np.concatenate([np.full(c, len(y) / (len(fitted) * c)) for c in per_set])
        mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-9
        z = (x - mean) / scale
        weights, bias = fit(z[:, columns], y, w, l2)
        full = np.zeros(x.shape[1])
        full[columns] = weights
        dim = (x.shape[1] - len(FEATURES)) // 2
        return BoundaryModel(mean, scale, full, bias, 0.5, 1, LOOKAHEAD, dim, self.embedder)

    def choose(self, model: BoundaryModel) -> tuple[BoundaryModel, float]:
        """The threshold and shortest segment with the lowest mean dev Pk."""
        best = min((float(np.mean([score(replace(model, threshold=t, min_segment=m), self.data[s])[0] for s in DEV])), t, m)
                   for t in THRESHOLDS for m in MIN_SEGMENTS)
        return replace(model, threshold=best[1], min_segment=best[2]), best[0]


def columns_without(group: str | None, width: int) -> np.ndarray:
    left_out = set(GROUPS.get(group, ())) if group else set()
    keep = [i for i, name in enumerate(FEATURES) if name not in left_out]
    probe = [] if group == "probe" else list(range(len(FEATURES), width))
    return np.asarray(keep + probe)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, help="only the first N threads of each set (a smoke run)")
    parser.add_argument("--no-ablation", action="store_true", help="fit the model only")
    parser.add_argument("--no-refit", action="store_true", help="ship the weights fitted on the fit sets alone")
    add_out(parser, Path("/tmp/seg"))
    add_data(parser)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    engine = Engine(Settings.load(embedder="use-m3"), llm=None)
    embedder = engine.parts.embedder
    data = {name: [(t, embedder.embed([embedding_text(m) for m in t.messages])) for t in threads]
            for name, threads in sets(args.limit).items()}
    trainer = Trainer(data, embedder.id)
    width = trainer.rows["tiage train"][0][0].shape[1]
    picked = min((trainer.choose(trainer.model(columns_without(None, width), l2)) + (l2,) for l2 in L2S),
                 key=lambda r: r[1])
    model, dev_pk, l2 = picked
    fitted_in = time.perf_counter() - began
    lines = ["# The learned segmenter: fit and ablation", "",
             f"Generated by `python benchmarks/seg_train.py` in {fitted_in:.0f} s. Fitted on TIAGE train and "
             f"JMultiWOZ threads 0-{FIT_THREADS - 1} (squeezed: no pauses), chosen on TIAGE dev and JMultiWOZ "
             f"threads {FIT_THREADS}-{TUNE_THREADS - 1}: L2 {l2:g}, threshold {model.threshold}, shortest segment "
             f"{model.min_segment}, lookahead {LOOKAHEAD} messages. The table: those weights on the dev sets, and "
             "each feature group left out (refitted, threshold chosen again). "
             + ("" if args.no_refit else "The weights that ship are fitted again on the fit and dev sets together "
                "with the same choices. ")
             + "Pk with k >= 2 (SuperDialseg's scorer), lower is better; held sets: benchmarks/segmentation.md.", ""]
    ablation = [["all features", *dev_row(model, data)]]
    if not args.no_ablation:
        for group in GROUPS:
            without, _ = trainer.choose(trainer.model(columns_without(group, width), l2))
            ablation.append([f"without {group}", *dev_row(without, data)])
    lines += table(["model", "TIAGE dev Pk", "WD", "F1", "JMultiWOZ 27-35 Pk", "WD", "F1"], ablation)
    (args.out / "seg_train.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if not args.no_refit:
        model = replace(trainer.model(columns_without(None, width), l2, FIT + DEV),
                        threshold=model.threshold, min_segment=model.min_segment)
    about = {"about": "semhist's learned topic-boundary scorer (indexers/segmodel.py), fitted by "
                      "benchmarks/seg_train.py", "licence": LICENCE,
             "data": [f"TIAGE train{'' if args.no_refit else ' and dev'} (github.com/HuiyuanXie/tiage, MIT)",
                      f"JMultiWOZ threads 0-{(FIT_THREADS if args.no_refit else TUNE_THREADS) - 1} of semhist's "
                      "jmultiwoz_threads (CC BY-SA 4.0)"],
             "l2": l2}
    (args.out / "segmenter.json").write_text(json.dumps(model.to_json(**about), separators=(",", ":")) + "\n",
                                             encoding="utf-8")
    print("\n".join(lines))


def dev_row(model: BoundaryModel, data) -> list[str]:
    out = []
    for name in ("tiage dev", "jmultiwoz 27-35"):
        pk, wd, f1, _ = score(model, data[name])
        out += [f"{pk:.3f}", f"{wd:.3f}", f"{f1:.3f}"]
    return out


if __name__ == "__main__":
    main()
