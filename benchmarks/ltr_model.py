"""The learned ranker of benchmarks/ltr_train.py and ltr_eval.py (a part of both, as
horizon_data.py is of horizon.py): a linear model over standardized features, fitted with a
listwise softmax objective (or pairwise logistic, RankNet) and L2, in numpy and scipy.

A model is a small JSON object: the feature names it reads, their training mean and standard
deviation, one weight each. Its score orders a request's messages; a request's softmax of the
scores is the model's share of the request's evidence each message holds (what packing by
evidence per token divides by the message's tokens).

The measures every ranking of a held request is scored by (`metrics`, `pooled`): recall of its
gold messages among the K best, and within a token budget of message lines.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

OBJECTIVES = ("softmax", "pairwise")
# What the hand ranking the learned one replaced added to the fused rank for a named author's
# block and for the block holding the most of the request's words (search.AUTHOR_BONUS and
# mentions.COVER_BONUS, 1 / (RRF_K + 1)): the `today` and `rrf+author` baselines.
HAND_BONUS = 1.0 / 61
PAIR_NEGATIVES = 64  # pairwise: negatives per gold message, the best-fused first then random

KS = (20, 40, 80)
BUDGETS = (1000, 2000, 4000)
SCAN = 800  # rows of a request a budget is filled from, best first (4k tokens is ~200 messages)
SETS = ("locomo", "locomo_merged", "jmultiwoz", "jmultiwoz_joined", "tiage")
# the fits compared with the main one: English real questions (LoCoMo, never shipped), Japanese alone,
# the shipped default's data (JMultiWOZ and TIAGE's chats) and TIAGE's alone (MIT)
FITS = {"en": "locomo,locomo_merged", "ja": "jmultiwoz,jmultiwoz_joined", "shipped": "jmultiwoz,jmultiwoz_joined,tiage",
        "tiage": "tiage", "all": ",".join(SETS)}


def check_sets(parser: argparse.ArgumentParser, flag: str, names: str) -> list[str]:
    """The comma-separated set `names` of `flag`; an error names any that is neither a benchmark
    set ltr_features.py writes nor `own` (its --file)."""
    sets = names.split(",")
    unknown = sorted(set(sets) - set(SETS) - {"own"})
    if unknown:
        parser.error(f"{flag}: unknown {', '.join(unknown)}; valid: {', '.join(SETS)}, own (ltr_features.py --file)")
    return sets


def load(paths: list[Path]) -> dict:
    """The .npz files of benchmarks/ltr_features.py as one: request numbers made unique."""
    parts = [dict(np.load(p, allow_pickle=False)) for p in paths]
    names = [str(n) for n in parts[0]["names"]]
    for p, part in zip(paths, parts):
        if [str(n) for n in part["names"]] != names:
            raise SystemExit(f"{p}: features differ from {paths[0]}'s (written by another version)")
    out: dict = {"names": names}
    offset = 0
    for part in parts:
        part["q"] = part["q"] + offset
        offset += len(part["q_gold"])
    for key in parts[0]:
        if key != "names":
            out[key] = np.concatenate([p[key] for p in parts])
    return out


def starts(q: np.ndarray) -> np.ndarray:
    """Where each request's rows start (rows are grouped by request, in order)."""
    return np.concatenate([[0], np.flatnonzero(np.diff(q)) + 1])


def _softmax_loss(w, Z, y, first, qrow, gold, l2):
    s = Z @ w
    top = np.maximum.reduceat(s, first)
    e = np.exp(s - top[qrow])
    total = np.add.reduceat(e, first)
    p = e / total[qrow]
    n = len(first)
    loss = np.sum(np.log(total) + top - np.add.reduceat(s * y, first) / gold) / n
    grad_s = (p - y / gold[qrow]) / n
    return loss + l2 * w @ w, Z.T @ grad_s + 2 * l2 * w


def _pairs(y: np.ndarray, first: np.ndarray, rank_score: np.ndarray,
           seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gold row, other row, weight) pairs: per request every gold message against the
    PAIR_NEGATIVES // 2 best-fused others and as many random others; each request weighs 1."""
    rng = np.random.default_rng(seed)
    ends = np.append(first[1:], len(y))
    g_all, n_all, w_all = [], [], []
    for a, z in zip(first, ends):
        rows = np.arange(a, z)
        pos, neg = rows[y[a:z] > 0], rows[y[a:z] == 0]
        if not len(pos) or not len(neg):
            continue
        hard = neg[np.argsort(-rank_score[neg], kind="stable")[:PAIR_NEGATIVES // 2]]
        rand = rng.choice(neg, size=min(len(neg), PAIR_NEGATIVES // 2), replace=False)
        others = np.unique(np.concatenate([hard, rand]))
        g = np.repeat(pos, len(others))
        o = np.tile(others, len(pos))
        g_all.append(g)
        n_all.append(o)
        w_all.append(np.full(len(g), 1.0 / len(g)))
    w = np.concatenate(w_all)
    return np.concatenate(g_all), np.concatenate(n_all), w / len(w_all)


def _pairwise_loss(w, Z, gi, oi, pw, l2):
    d = Z[gi] @ w - Z[oi] @ w
    loss = np.sum(pw * np.logaddexp(0.0, -d))
    g = -pw / (1.0 + np.exp(d))  # d loss / d d
    grad = Z[gi].T @ g - Z[oi].T @ g
    return loss + l2 * w @ w, grad + 2 * l2 * w


def fit(data: dict, columns: list[int] | None = None, l2: float = 1e-3, objective: str = "softmax") -> dict:
    """A model fitted on `data` (load()), reading the feature `columns` (all by default)."""
    began = time.perf_counter()
    names = data["names"]
    columns = list(range(len(names))) if columns is None else columns
    X = data["X"][:, columns].astype(np.float64)
    y = data["y"].astype(np.float64)
    q = data["q"]
    # only requests with gold among their rows teach anything
    first = starts(q)
    has = np.add.reduceat(y, first) > 0
    keep = has[np.searchsorted(first, np.arange(len(q)), side="right") - 1]
    X, y, q = X[keep], y[keep], q[keep]
    mean, std = X.mean(0), X.std(0)
    std[std < 1e-9] = 1.0  # a constant feature (no named time in the set) gets weight 0 by L2
    Z = (X - mean) / std
    first = starts(q)
    qrow = np.searchsorted(first, np.arange(len(q)), side="right") - 1
    if objective == "softmax":
        gold = np.add.reduceat(y, first)
        args = (Z, y, first, qrow, gold, l2)
        fun = _softmax_loss
    else:
        gi, oi, pw = _pairs(y, first, data["rrf"][keep])
        args, fun = (Z, gi, oi, pw, l2), _pairwise_loss
    res = minimize(fun, np.zeros(Z.shape[1]), args=args, jac=True, method="L-BFGS-B",
                   options={"maxiter": 500})
    return {"features": [names[c] for c in columns], "mean": mean.round(6).tolist(), "std": std.round(6).tolist(),
            "weights": res.x.round(6).tolist(), "objective": objective, "l2": l2,
            "fit": {"requests": int(len(first)), "rows": int(len(y)), "loss": round(float(res.fun), 5),
                    "iterations": int(res.nit), "seconds": round(time.perf_counter() - began, 2)}}


def scores(model: dict, data: dict) -> np.ndarray:
    """The model's score of every row of `data`."""
    col = {n: i for i, n in enumerate(data["names"])}
    X = data["X"][:, [col[n] for n in model["features"]]].astype(np.float64)
    return ((X - np.asarray(model["mean"])) / np.asarray(model["std"])) @ np.asarray(model["weights"])


def shares(s: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Per row, the softmax of the scores within its request: its share of the evidence."""
    first = starts(q)
    qrow = np.searchsorted(first, np.arange(len(q)), side="right") - 1
    e = np.exp(s - np.maximum.reduceat(s, first)[qrow])
    return e / np.add.reduceat(e, first)[qrow]


def save(model: dict, path: Path) -> int:
    """Writes the model as JSON; its size in bytes."""
    text = json.dumps(model, ensure_ascii=False, separators=(",", ":")) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return len(text.encode("utf-8"))


def _fill(order: list[int], tokens: list[int], gold: list[bool], budget: int) -> int:
    """Gold messages taken best first while they fit `budget` (one that does not is skipped)."""
    left, found, smallest = budget, 0, min(tokens)
    for r in order:
        t = tokens[r]
        if t <= left:
            left -= t
            found += gold[r]
            if left < smallest:
                break
    return found


def metrics(data: dict, s: np.ndarray, per_token: np.ndarray) -> list[dict]:
    """Per request: recall@K and at each budget, by `s` and by `per_token`."""
    first = starts(data["q"])
    ends = np.append(first[1:], len(s))
    out = []
    for k, (a, z) in enumerate(zip(first, ends)):
        y, tok = data["y"][a:z].astype(bool), data["tokens"][a:z]
        total = int(data["q_gold"][k])
        order = np.argsort(-s[a:z], kind="stable")
        row = {f"R@{K}": float(y[order[:K]].sum()) / total for K in KS}
        by_tok = np.argsort(-per_token[a:z], kind="stable")
        tl, gl = tok.tolist(), y.tolist()
        for b in BUDGETS:
            row[f"{b // 1000}k"] = _fill(order[:SCAN].tolist(), tl, gl, b) / total
            row[f"{b // 1000}k/tok"] = _fill(by_tok[:SCAN].tolist(), tl, gl, b) / total
        out.append(row)
    return out


def pooled(rows: list[dict], cats: np.ndarray) -> dict[str, dict]:
    by: dict[str, list[dict]] = defaultdict(list)
    for r, c in zip(rows, cats):
        by["all"].append(r)
        by[str(c)].append(r)
        if str(c).startswith("locomo_cat"):  # LoCoMo's own question types, without session summaries
            by["cat1-4"].append(r)
    return {c: {m: round(float(np.mean([r[m] for r in rs])), 3) for m in rs[0]} | {"n": len(rs)}
            for c, rs in sorted(by.items())}
