"""Learning to rank, step 2: fit the linear ranker on TUNE requests only (issue 52).

    python benchmarks/ltr_features.py --out /tmp/ltr       # the features, first
    python benchmarks/ltr_train.py --train jmultiwoz,jmultiwoz_joined --name ranker_ja   # /tmp/ltr/ranker_ja.json
    python benchmarks/ltr_train.py --train locomo,locomo_merged,jmultiwoz,jmultiwoz_joined
    python benchmarks/ltr_train.py --train jmultiwoz,jmultiwoz_joined,tiage --out retrieval/pipeline  # what ships

Reads only DIR/SET_tune.npz (LoCoMo's first five conversations, JMultiWOZ's first 36 threads):
a held request never reaches a fit. Features are standardized with the training rows' mean and
deviation; the weights minimise a listwise softmax loss (each request's gold messages against
all its rows; `--objective pairwise`: RankNet's logistic loss on gold/other pairs) plus L2.
Writes the model as JSON (feature names, mean, deviation, weights, how it was fitted).

Licence: LoCoMo is CC BY-NC 4.0: it is used to choose and to report, never to fit the weights that
ship. Those are fitted on JMultiWOZ (CC BY-SA 4.0) and TIAGE's chats with questions the packaged
model wrote (MIT; benchmarks/tiage_questions.py); the model records its data and its licence.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import add_out
from ltr_model import OBJECTIVES, SETS, check_sets, fit, load, save

# The weights' own terms follow the most restrictive data they were fitted on.
WEIGHTS_LICENCE = (
    ("locomo", "CC BY-NC 4.0, as LoCoMo (github.com/snap-research/locomo): for measuring only, never shipped"),
    ("jmultiwoz", "CC BY-SA 4.0 (creativecommons.org/licenses/by-sa/4.0), as the data it was fitted on: JMultiWOZ "
                  "(Ohashi et al., LREC-COLING 2024, github.com/nu-dialogue/jmultiwoz, CC BY-SA 4.0) and TIAGE's "
                  "chats (github.com/HuiyuanXie/tiage, MIT); see semhist's data/benchmarks/README.md"),
    ("tiage", "MIT, as TIAGE (github.com/HuiyuanXie/tiage), the data it was fitted on"))
GROUPS_OF = {"jmultiwoz": "JMultiWOZ (CC BY-SA 4.0)", "jmultiwoz_joined": "JMultiWOZ (CC BY-SA 4.0)",
             "locomo": "LoCoMo (CC BY-NC 4.0)", "locomo_merged": "LoCoMo (CC BY-NC 4.0)",
             "tiage": "TIAGE (MIT), questions by Qwen2.5-Coder-1.5B-Instruct (Apache-2.0)"}


def tune_files(folder: Path, sets: list[str]) -> list[Path]:
    """The tune halves of `sets`: never a held one."""
    paths = [folder / f"{s}_tune.npz" for s in sets]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: run benchmarks/ltr_features.py first")
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=Path, default=Path("/tmp/ltr"), help="ltr_features.py's folder")
    parser.add_argument("--train", default=",".join(SETS), help=f"tune sets fitted on, of {', '.join(SETS)}")
    parser.add_argument("--objective", choices=OBJECTIVES, default="softmax")
    parser.add_argument("--l2", type=float, default=1e-3)
    parser.add_argument("--drop", default="", help="feature groups left out (semhist.pipeline.features.GROUPS)")
    parser.add_argument("--name", default="ranker", help="the model's file name, DIR/NAME.json")
    add_out(parser, Path("/tmp/ltr"))  # not the package: what ships is chosen in a later step
    args = parser.parse_args()
    sets = check_sets(parser, "--train", args.train)
    from semhist.pipeline.features import GROUPS, group_columns

    drop = [g for g in args.drop.split(",") if g]
    if set(drop) - set(GROUPS):
        parser.error(f"--drop: valid: {', '.join(GROUPS)}")
    data = load(tune_files(args.features, sets))
    model = fit(data, group_columns(drop), args.l2, args.objective)
    model["trained_on"] = {s: "tune" for s in sets}
    model["data_licences"] = sorted({GROUPS_OF.get(s, "your own data") for s in sets})
    model["licence"] = next((text for src, text in WEIGHTS_LICENCE if any(s.startswith(src) for s in sets)),
                            "as your own data's")
    path = args.out / f"{args.name}.json"
    size = save(model, path)
    weights = sorted(zip(model["features"], model["weights"]), key=lambda fw: -abs(fw[1]))
    print(json.dumps({"out": str(path), "bytes": size, **model["fit"]}))
    for name, w in weights:
        print(f"{name:>14} {w:+.3f}")


if __name__ == "__main__":
    main()
