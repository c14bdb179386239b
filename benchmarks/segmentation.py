"""Segmentation against human topic boundaries: Pk, WindowDiff, boundary F1, ms per message.

    python benchmarks/segmentation.py            # TIAGE dev and JMultiWOZ's held threads
    python benchmarks/segmentation.py --tiage-test anno_test.json --dialseg711 dialseg_711.json

The two public test sets are not shipped (docs/guides/evaluation.md says where to get them):
`--tiage-test` is TIAGE's `data/personachat/anno/test/anno_test.json`, `--dialseg711` the
`data/eval/dialseg_711.json` of lxing532/Dialogue-Topic-Segmenter. Nothing here was fitted or
chosen on them, nor on JMultiWOZ threads 36+ (benchmarks/seg_train.py fits and chooses on the
tune halves); TIAGE dev chose the learned segmenter's threshold and was fitted on.

Compared: no cut, fixed-size blocks, time gaps, time gaps with topic sub-segments (the units
retrieval uses by default), and the blocks of each topic segmenter, each with the settings'
defaults and no size limit. JMultiWOZ is scored with its pauses, squeezed to a second apart,
and squeezed as a Teams bot stores it (speaker names, tool calls). Pk and WindowDiff use
k >= 2 as SuperDialseg's scorer (published DialSeg711 and TIAGE figures) does; `Pk k>=1` is
`semhist eval --segmentation`'s. Lower is better, F1 higher. ms per message is the segmenter's
time over whole threads; `online` is its time per message appended (the open tail segmented
again at each append, as the write path does). Writes benchmarks/segmentation.md.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from semhist import Engine
from semhist.indexers.segment import SEGMENTERS, TimeGapSegmenter
from semhist.kernel.errors import InputError
from semhist.kernel.model import Message, embedding_text
from semhist.kernel.settings import Settings
from semhist.segscore import boundary_f1, pk_window_diff

from common import add_data, add_out, data_file, out_file, table, teams_shape
from seg_data import TUNE_THREADS, Labelled, dialseg711, from_jsonl, squeezed, tiage_anno

Method = Callable[[tuple[Message, ...], np.ndarray], list[int]]
NO_LIMIT = 10**9  # tokens: no size cuts, so only the boundaries themselves are scored


def starts_of(blocks, with_parts: bool) -> list[int]:
    return sorted(b.message_ids[o] for b in blocks for o in (b.parts if with_parts else (0,)))


def methods(settings: Settings) -> dict[str, Method]:
    params = {k: v for k, v in settings.segment_params.items() if k not in ("model", "min_tokens")}
    params["max_block_tokens"] = NO_LIMIT
    learned = {**params, "model": settings.segmenter_model}
    out: dict[str, Method] = {
        "no cut": lambda msgs, v: [0],
        "fixed 3 messages": lambda msgs, v: list(range(0, len(msgs), 3)),
        "fixed 6 messages": lambda msgs, v: list(range(0, len(msgs), 6)),
        "time gaps + topic sub-segments (default units)":
            lambda msgs, v: starts_of(TimeGapSegmenter(**params).segment(msgs, v), True),
    }
    for name, factory in SEGMENTERS.items():
        # the learned scorer at every shift; with the settings' token floor (for retrieval) in its own row
        segmenter = factory(**learned, min_tokens=0) if name == "time+learned" else factory(**params)
        out[name] = lambda msgs, v, s=segmenter: starts_of(s.segment(msgs, v), False)
    floored = SEGMENTERS["time+learned"](**learned, min_tokens=settings.topic_min_tokens)
    out[f"time+learned, topic_min_tokens {settings.topic_min_tokens}"] = \
        lambda msgs, v: starts_of(floored.segment(msgs, v), False)
    return out


def online_ms(segmenter, messages: tuple[Message, ...], vectors: np.ndarray) -> float:
    """ms per appended message when the open tail is segmented again at every append and the
    blocks before its last are closed for good (indexers/ingest.py `segment_tail`)."""
    began, tail = time.perf_counter(), 0
    for end in range(1, len(messages) + 1):
        blocks = segmenter.segment(messages[tail:end], vectors[tail:end])
        if len(blocks) > 1:
            tail += blocks[-1].message_ids[0]
    return (time.perf_counter() - began) * 1000 / max(1, len(messages))


def evaluate(items: list[Labelled], engine: Engine, settings: Settings) -> list[list[str]]:
    embedder = engine.parts.embedder
    scored = {name: [] for name in methods(settings)}
    spent = dict.fromkeys(scored, 0.0)
    count = sum(len(t.messages) for t in items)
    for item in items:
        vectors = embedder.embed([embedding_text(m) for m in item.messages])
        n = len(item.messages)
        for name, method in methods(settings).items():
            began = time.perf_counter()
            hyp = method(item.messages, vectors)
            spent[name] += time.perf_counter() - began
            scored[name].append((*pk_window_diff(item.starts, hyp, n, 2), boundary_f1(item.starts, hyp),
                                 pk_window_diff(item.starts, hyp, n)[0]))
    rows = []
    for name, values in scored.items():
        pk, wd, f1, pk1 = np.mean(values, axis=0)
        rows.append([name, f"{pk:.3f}", f"{wd:.3f}", f"{f1:.3f}", f"{pk1:.3f}", f"{spent[name] * 1000 / count:.3f}"])
    return rows


def datasets(args) -> dict[str, list[Labelled]]:
    jmw = from_jsonl(data_file("jmultiwoz_threads.jsonl"))[TUNE_THREADS:]
    out: dict[str, list[Labelled]] = {}
    if args.tiage_test:
        out["TIAGE test (held)"] = tiage_anno(args.tiage_test)
    if args.dialseg711:
        out["DialSeg711 test (held)"] = dialseg711(args.dialseg711)
    out["TIAGE dev (chose the threshold; the shipped weights were then fitted on it too)"] = from_jsonl(data_file("tiage.jsonl"), "dev")
    out[f"JMultiWOZ threads {TUNE_THREADS}+ (held), with their pauses"] = jmw
    out[f"JMultiWOZ threads {TUNE_THREADS}+ (held), squeezed"] = [squeezed(t) for t in jmw]
    out[f"JMultiWOZ threads {TUNE_THREADS}+ (held), squeezed, Teams-shaped"] = [
        replace(t, messages=tuple(teams_shape(list(t.messages)))) for t in map(squeezed, jmw)]
    return {name: items[:args.limit] for name, items in out.items()}


def online_rows(items: list[Labelled], engine: Engine, settings: Settings) -> list[list[str]]:
    params = {k: v for k, v in settings.segment_params.items() if k not in ("model", "min_tokens")}
    rows = []
    for name in ("time-gap", "time+topic", "time+learned"):
        segmenter = SEGMENTERS[name](**params, **({"min_tokens": 0} if name == "time+learned" else {}))
        spent = [online_ms(segmenter, t.messages, engine.parts.embedder.embed([embedding_text(m) for m in t.messages]))
                 for t in items]
        rows.append([name, f"{np.mean(spent):.3f}", f"{max(spent):.3f}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiage-test", type=Path, metavar="FILE", help="TIAGE's anno_test.json")
    parser.add_argument("--dialseg711", type=Path, metavar="FILE", help="lxing532's dialseg_711.json")
    parser.add_argument("--limit", type=int, help="only the first N threads of each set")
    parser.add_argument("--cache-dir")
    add_out(parser)
    add_data(parser)
    args = parser.parse_args()
    settings = Settings.load(cache_dir=args.cache_dir, embedder="use-m3")
    engine = Engine(settings, llm=None)
    lines = ["# Segmentation against human topic boundaries", "",
             "Generated by `python benchmarks/segmentation.py --tiage-test anno_test.json --dialseg711 "
             "dialseg_711.json` (the files: docs/guides/evaluation.md). USE-m3 embeddings, the settings' "
             "defaults, no size limit. Pk and WindowDiff with k >= 2 (SuperDialseg's scorer), `Pk k>=1` as "
             "`semhist eval --segmentation` computes it; lower is better, boundary F1 higher.", ""]
    try:
        sets = datasets(args)
    except InputError as exc:  # a test file that is not what its option names
        parser.error(str(exc))
    for name, items in sets.items():
        lines += [f"## {name}", "", f"{len(items)} threads, {sum(len(t.messages) for t in items):,} messages.", ""]
        lines += table(["method", "Pk", "WindowDiff", "F1", "Pk k>=1", "ms per message"],
                       evaluate(items, engine, settings))
        lines.append("")
    squeezed_jmw = sets[f"JMultiWOZ threads {TUNE_THREADS}+ (held), squeezed"][:args.limit or 10]
    lines += ["## Online: ms per message appended", "",
              f"The first {len(squeezed_jmw)} squeezed JMultiWOZ held threads appended a message at a time; the "
              "open tail segmented again at each append.", ""]
    lines += table(["segmenter", "ms per append, mean of threads", "slowest thread"],
                   online_rows(squeezed_jmw, engine, settings))
    out_file(args.out, "segmentation.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
