"""Learning to rank: gradient-boosted trees against the shipped linear model, HELD requests.

    python benchmarks/ltr_features.py --out /tmp/ltr     # the features, first
    python benchmarks/ltr_trees.py --features /tmp/ltr --out /tmp/ltr

Issue 52 allowed either model family. Both are fitted here on the same tune requests (by
default the shipped model's: JMultiWOZ alone and joined, TIAGE's chats) and scored on the same
held ones with ltr_eval.py's measures (ltr_model.metrics): the linear model with its listwise
softmax objective (benchmarks/ltr_model.py), and LightGBM's LambdaRank (trees of 15 leaves, 50 rows a leaf at
least, learning rate 0.05, rows and features subsampled) after each number of rounds in
--rounds. LightGBM is needed only here: `pip install semhist[ltr]`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from common import add_out, table
from ltr_model import FITS, KS, SETS, check_sets, fit, load, metrics, pooled, scores, shares, starts

PARAMS = {"objective": "lambdarank", "learning_rate": 0.05, "num_leaves": 15, "min_data_in_leaf": 50,
          "feature_fraction": 0.8, "bagging_fraction": 0.8, "bagging_freq": 1, "lambdarank_truncation_level": 40,
          "label_gain": [0, 1], "verbose": -1, "num_threads": 2, "seed": 1, "deterministic": True}
COLUMNS = ("R@20", "R@40", "R@80", "1k", "2k", "4k")


def _lightgbm():
    try:
        import lightgbm
    except ImportError:
        raise SystemExit("ltr_trees.py needs LightGBM: pip install 'semhist[ltr]'") from None
    return lightgbm


def _rounds(text: str) -> list[int]:
    """--rounds: positive whole numbers, comma-separated."""
    try:
        rounds = [int(r) for r in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not whole numbers: {text!r}") from None
    if min(rounds) < 1:
        raise argparse.ArgumentTypeError("a number of rounds is 1 or more")
    return rounds


def trees(data: dict, rounds: list[int]):
    """One booster fitted on `data` for the most of `rounds` (each of them a cut of it), the
    fit's seconds and each cut's size as JSON."""
    lgb = _lightgbm()
    first = starts(data["q"])
    groups = np.diff(np.append(first, len(data["q"])))
    began = time.perf_counter()
    booster = lgb.train(PARAMS, lgb.Dataset(data["X"], data["y"].astype(int), group=groups),
                        num_boost_round=max(rounds))
    seconds = round(time.perf_counter() - began, 1)
    sizes = {r: len(json.dumps(booster.dump_model(num_iteration=r))) for r in rounds}
    return booster, {"seconds": seconds, "json_bytes": sizes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=Path, default=Path("/tmp/ltr"))
    parser.add_argument("--sets", default=",".join(SETS), help="held sets scored")
    parser.add_argument("--train", default=FITS["shipped"], help="tune sets both fit on (default: the shipped model's)")
    parser.add_argument("--rounds", type=_rounds, default="100,300", help="boosting rounds, comma-separated")
    add_out(parser, Path("/tmp/ltr"))
    args = parser.parse_args()
    check_sets(parser, "--sets", args.sets)
    names = [n for n in check_sets(parser, "--train", args.train) if (args.features / f"{n}_tune.npz").exists()]
    if not names:
        parser.error(f"--train {args.train}: no tune features of these sets in {args.features} "
                     "(benchmarks/ltr_features.py writes them)")
    data = load([args.features / f"{n}_tune.npz" for n in names])
    began = time.perf_counter()
    linear = fit(data, None, 1e-3)
    linear_seconds = round(time.perf_counter() - began, 1)
    booster, info = trees(data, args.rounds)
    given = {"sets": args.sets, "train": args.train, "rounds": ",".join(map(str, args.rounds))}
    results: dict = {"command": "python benchmarks/ltr_trees.py " + " ".join(
        f"--{k} {v}" for k, v in given.items() if v != parser.get_default(k)).strip(),
        "train": names, "linear_seconds": linear_seconds, "trees": info, "sets": {}}
    for s in [s for s in args.sets.split(",") if (args.features / f"{s}_held.npz").exists()]:
        held = load([args.features / f"{s}_held.npz"])
        tok = np.maximum(held["tokens"], 1)
        ls = scores(linear, held)
        rankings = {"linear (shipped)": (ls, shares(ls, held["q"]) / tok)}
        for r in args.rounds:
            ts = booster.predict(held["X"], num_iteration=r)
            rankings[f"trees, {r} rounds"] = (ts, ts / tok)
        results["sets"][s] = {n: pooled(metrics(held, *r), held["q_category"]) for n, r in rankings.items()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ltr_trees.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    text = render(results)
    (args.out / "ltr_trees.md").write_text(text, encoding="utf-8")
    print(text)


def render(results: dict) -> str:
    t = results["trees"]
    sizes = ", ".join(f"{r} rounds {b:,} bytes" for r, b in t["json_bytes"].items())
    lines = ["# Gradient-boosted trees against the linear ranker, held requests (message level)", "",
             f"Generated by `{results['command']}`. Both fitted on the tune requests of {', '.join(results['train'])}; "
             f"the linear fit took {results['linear_seconds']} s, the trees {t['seconds']} s ({sizes} as JSON). "
             f"Recall of gold messages among the K best ({', '.join(f'R@{k}' for k in KS)}) and within 1k / 2k / 4k "
             "tokens of message lines, best first.", ""]
    for s, by in results["sets"].items():
        first = next(iter(by.values()))
        pick = "cat1-4" if "cat1-4" in first else "all"
        lines += [f"## {s} held: {first[pick]['n']} requests ({pick})", ""]
        lines += table(["ranking", *COLUMNS], [[n, *(f"{r[pick][c]:.3f}" for c in COLUMNS)] for n, r in by.items()])
        cats = [c for c in first if c.startswith("locomo_cat")]
        if cats:
            lines += ["", "Per category (R@40 / 2k):", ""]
            lines += table(["category", "n", *by], [[c, first[c]["n"], *(
                f"{by[n][c]['R@40']:.3f} / {by[n][c]['2k']:.3f}" for n in by)] for c in cats])
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
