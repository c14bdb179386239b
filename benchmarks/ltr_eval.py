"""Learning to rank, step 3: the learned ranker against today's ranking on HELD requests.

    python benchmarks/ltr_features.py --out /tmp/ltr     # the features, first
    python benchmarks/ltr_eval.py --features /tmp/ltr --out /tmp/ltr

Every model is fitted here on tune requests only (benchmarks/ltr_model.py, as ltr_train.py
fits it) and scored on the held ones: LoCoMo's last five conversations (each alone, and their
requests on the ten merged), JMultiWOZ's last 35 threads. Per request, over the message rows
ltr_features.py wrote for it:

- recall@K: the share of its gold messages among the K best (K = 20, 40, 80);
- recall at a budget: messages taken best first while their tokens (each as a prompt line)
  fit 1k / 2k / 4k, one that does not fit skipped; `/tok`: taken by score per token (the
  learned model's share of the request's evidence, or the baseline's score, over its tokens).

Rankings: `today` (the hand ranking the learned one replaced: fused rank plus the author and
cover bonuses, blocks first for a topic request), `rrf` (fused dense + BM25 message rank),
`rrf+author` (with the author bonus), `bm25` (alone, cosine breaking ties), `learned` (fitted on
--train: by default the shipped model's data, JMultiWOZ and TIAGE's chats), the same fitted on
other data (`en`: LoCoMo alone, `ja`: JMultiWOZ alone, `tiage`: TIAGE's chats alone, `all`: every
set, LoCoMo included; LoCoMo is CC BY-NC 4.0, so a fit on it is for comparison only), a pairwise
fit, and `-GROUP`: refitted without one feature group.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from common import add_out, table
from ltr_model import (BUDGETS, FITS, HAND_BONUS, KS, SETS, check_sets, fit, load, metrics, pooled, save, scores,
                       shares)

RULES = ("today", "blocks-first")  # orders by rule, not by a score
GROUP_NAMES = ("lexical", "dense", "fused", "block", "cover", "author", "recency", "length", "neighbours", "dialogue",
               "time")  # semhist.pipeline.features.GROUPS, named here for --help without importing semhist


def today(data: dict) -> np.ndarray:
    """`blocks`' order, per message: the conversations of a named time first (time_candidates),
    then a topic request's blocks by fused block score with the author boost (topic_candidates;
    term cover and mentions_first are off on a thread indexed whole, as all of these are), a
    fact request's messages by fused rank with the boost (fact_candidates); within a block by
    fused rank. Fused scores are below 0.05, so the scales below order lexicographically.
    On a thread past view_limit a topic request's blocks also get the term cover bonus;
    mentions_first and mentions_run_on (packing orders, not scores) are not reproduced."""
    col = {n: i for i, n in enumerate(data["names"])}
    x = lambda n: data["X"][:, col[n]].astype(np.float64)  # noqa: E731
    topic = (data["q_intent"] == "topic")[data["q"]]
    long = data["q_long"][data["q"]] if "q_long" in data else np.zeros(len(topic), dtype=bool)
    block = x("blk_fused") + HAND_BONUS * x("author_blk") + np.where(long, HAND_BONUS * x("cover_top"), 0.0)
    return 100.0 * x("time_conv") + np.where(topic, 10.0 * block, 0.0) + data["rrf_boost"]


def blocks_first(data: dict) -> np.ndarray:
    """today() with every request ranked as a topic one: its best blocks' messages first."""
    col = {n: i for i, n in enumerate(data["names"])}
    x = lambda n: data["X"][:, col[n]].astype(np.float64)  # noqa: E731
    return 100.0 * x("time_conv") + 10.0 * (x("blk_fused") + HAND_BONUS * x("author_blk")) + data["rrf_boost"]


def baseline_rankings(data: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    tok = np.maximum(data["tokens"], 1).astype(np.float64)
    bm25 = data["bm25"] + 1e-4 * data["cos"]  # cosine breaks ties (most rows match no term)
    now, first = today(data), blocks_first(data)
    return {"today": (now, now / tok), "blocks-first": (first, first / tok), "rrf": (data["rrf"], data["rrf"] / tok),
            "rrf+author": (data["rrf_boost"], data["rrf_boost"] / tok),
            "bm25": (bm25, np.maximum(bm25, 1e-6) / tok)}


def learned(model: dict, data: dict) -> tuple[np.ndarray, np.ndarray]:
    s = scores(model, data)
    return s, shares(s, data["q"]) / np.maximum(data["tokens"], 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=Path, default=Path("/tmp/ltr"))
    parser.add_argument("--sets", default=",".join(SETS), help="held sets scored")
    parser.add_argument("--train", default=FITS["shipped"], help="tune sets the main model fits on (default: the "
                        "shipped model's)")
    parser.add_argument("--l2", type=float, default=1e-3)
    parser.add_argument("--ablate", default=",".join([*GROUP_NAMES, "lexical+dense+fused"]),
                        help="refits without a feature group (GROUP or GROUP+GROUP), comma-separated; '' for none")
    add_out(parser, Path("/tmp/ltr"))  # ltr_eval.json / .md and the fitted models
    args = parser.parse_args()
    check_sets(parser, "--sets", args.sets)
    check_sets(parser, "--train", args.train)
    from semhist.pipeline.features import group_columns

    sets = [s for s in args.sets.split(",") if (args.features / f"{s}_held.npz").exists()]
    held = {s: load([args.features / f"{s}_held.npz"]) for s in sets}
    # the sets of a fit whose features were written (a run of one language has no other)
    tune_of = lambda names: load([args.features / f"{n}_tune.npz" for n in names.split(",")  # noqa: E731
                                  if (args.features / f"{n}_tune.npz").exists()])
    if not any((args.features / f"{n}_tune.npz").exists() for n in args.train.split(",")):
        parser.error(f"--train {args.train}: no tune features of these sets in {args.features} "
                     "(benchmarks/ltr_features.py writes them)")
    models, fits = {}, {}
    main_data = tune_of(args.train)
    models["learned"] = fit(main_data, None, args.l2)
    models["learned pairwise"] = fit(main_data, None, args.l2, "pairwise")
    for label, names in FITS.items():
        written = any((args.features / f"{n}_tune.npz").exists() for n in names.split(","))
        if names != args.train and written:  # a fit on sets whose features were not written is left out
            models[f"learned ({label} fit)"] = fit(tune_of(names), None, args.l2)
    for drop in filter(None, args.ablate.split(",")):
        models[f"-{drop}"] = fit(main_data, group_columns(drop.split("+")), args.l2)
    for name, m in models.items():
        fits[name] = m["fit"]
        m["trained_on"] = args.train if not name.startswith("learned (") else FITS[name[9:].split()[0]]
    files = {"learned": "ranker", **{f"learned ({label} fit)": f"ranker_{label}" for label in FITS}}
    sizes = {n: save(models[n], args.out / f"{f}.json") for n, f in files.items() if n in models}

    began = time.perf_counter()
    results: dict = {"command": "python benchmarks/ltr_eval.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k in ("sets", "train", "l2", "ablate")
        and v != parser.get_default(k)).strip(), "fits": fits, "model_bytes": sizes, "sets": {},
        "weights": dict(zip(models["learned"]["features"], models["learned"]["weights"]))}
    for s, data in held.items():
        rankings = baseline_rankings(data) | {n: learned(m, data) for n, m in models.items()}
        results["sets"][s] = {n: pooled(metrics(data, *r), data["q_category"]) for n, r in rankings.items()}
    results["eval_seconds"] = round(time.perf_counter() - began, 1)
    (args.out / "ltr_eval.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    text = render(results)
    (args.out / "ltr_eval.md").write_text(text, encoding="utf-8")
    print(text)


def render(results: dict) -> str:
    cols = [f"R@{k}" for k in KS] + [f"{b // 1000}k" for b in BUDGETS] + [f"{b // 1000}k/tok" for b in BUDGETS]
    lines = ["# Learned ranker vs today's ranking, held requests (message level)", "",
             f"Generated by `{results['command']}`. Recall of gold messages among the K best, and within a token "
             "budget of message lines (best first; `/tok`: best score per token first).", ""]
    for s, by in results["sets"].items():
        n = by["rrf"]["all"]["n"]
        pick = "cat1-4" if "cat1-4" in by["rrf"] else "all"
        lines += [f"## {s} held: {n} requests ({by['rrf'][pick]['n']} in the table: {pick})", ""]
        # a rule's order is a lexicographic key: per token it means nothing
        cell = lambda name, r, c: "-" if name in RULES and c.endswith("/tok") else f"{r[pick][c]:.3f}"  # noqa: E731
        lines += table(["ranking", *cols], [[name, *(cell(name, r, c) for c in cols)] for name, r in by.items()])
        cats = [c for c in by["rrf"] if c != "all"]
        main = [m for m in ("today", "rrf", "bm25", "learned", *(f"learned ({f} fit)" for f in FITS)) if m in by]
        lines += ["", "Per category (R@40 / 2k / 2k/tok):", ""]
        lines += table(["category", "n", *main], [[c, by["rrf"][c]["n"], *(
            f"{by[m][c]['R@40']:.3f} / {by[m][c]['2k']:.3f} / "
            + ("-" if m in RULES else f"{by[m][c]['2k/tok']:.3f}") for m in main)] for c in cats])
        lines.append("")
    w = sorted(results["weights"].items(), key=lambda kv: -abs(kv[1]))
    lines += ["## Weights of `learned` (standardized features)", "",
              ", ".join(f"{k} {v:+.2f}" for k, v in w), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
