"""Which messages hold a request's evidence, best first: the score `blocks` orders its candidates
by (a fact question's windows around its best messages, a topic request's blocks by their best
message).

Rankers, by name (the `ranker` setting):

- `learned` (the default): a linear model over the features of features.request_rows (BM25,
  dense and fused scores and ranks, the block's best of each, term cover, mentions, a named
  author speaking, named time, neighbours, question and answer, length, recency), fitted with
  a listwise softmax objective on labelled conversations (benchmarks/ltr_train.py). It
  replaces the hand-tuned bonuses that were added to the fused rank one at a time (a named
  author's block, the block covering the most of the request's words): the model weighs each
  signal by what the labels say it is worth. The shipped weights are `ranker.json` beside this
  file (its `data_licences` name what it was fitted on); `ranker_model` names another file
  fitted the same way, on your own labelled threads.
- `fused`: dense and BM25 ranks fused (search.fused_rows), no model: the ranking before it.

A model file is read once per process (a few kilobytes of JSON; a bounded cache by path).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Protocol

import numpy as np

from semhist.indexers.index.thread_index import ThreadIndex
from semhist.kernel.errors import ConfigError

from .features import NAMES, request_rows
from .keyword import KeywordResult
from .search import fused_rows, searched_terms

SHIPPED = "ranker.json"


class Ranker(Protocol):
    def rows(self, index: ThreadIndex, plan: KeywordResult, dense: np.ndarray, gap_seconds: float) -> np.ndarray:
        """A score per row of `index` (higher: more likely the request's evidence)."""
        ...


@dataclass(frozen=True)
class LinearRanker:
    """A linear model over standardized features: score = ((x - mean) / std) · weights."""

    columns: np.ndarray  # the features it reads, as columns of features.NAMES
    mean: np.ndarray
    std: np.ndarray
    weights: np.ndarray
    source: str  # the file it was read from, for messages

    @classmethod
    def parse(cls, model: dict, source: str) -> LinearRanker:
        """The model of a JSON object as benchmarks/ltr_model.py writes it."""
        try:
            names = [str(n) for n in model["features"]]
            mean, std, weights = (np.asarray(model[k], dtype=np.float64) for k in ("mean", "std", "weights"))
        except KeyError as e:
            raise ConfigError(f"ranker model {source}: not a model file (it has no {e.args[0]!r})") from None
        except (TypeError, ValueError) as e:
            raise ConfigError(f"ranker model {source}: not a model file ({e})") from None
        unknown = sorted(set(names) - set(NAMES))
        if unknown:
            raise ConfigError(f"ranker model {source}: features this version does not compute: "
                              f"{', '.join(unknown)}; fit it again (benchmarks/ltr_train.py)")
        if not names or not (len(names) == len(mean) == len(std) == len(weights)) or not np.all(std > 0) \
                or not all(np.all(np.isfinite(a)) for a in (mean, std, weights)):
            raise ConfigError(f"ranker model {source}: features, mean, std and weights do not line up "
                              "(one finite number each, std above 0)")
        columns = np.array([NAMES.index(n) for n in names], dtype=np.int64)
        return cls(columns, mean, std, weights, source)

    def rows(self, index: ThreadIndex, plan: KeywordResult, dense: np.ndarray, gap_seconds: float) -> np.ndarray:
        if not len(index.rows):
            return np.zeros(0)
        x = request_rows(index, plan, dense, gap_seconds).features[:, self.columns].astype(np.float64)
        return ((x - self.mean) / self.std) @ self.weights


class FusedRanker:
    """Dense and BM25 ranks fused, nothing learned."""

    def rows(self, index: ThreadIndex, plan: KeywordResult, dense: np.ndarray, gap_seconds: float) -> np.ndarray:
        return fused_rows(index, dense, searched_terms(index, plan.terms))


@lru_cache(maxsize=8)
def load_model(path: str | None = None) -> LinearRanker:
    """The model in the file `path` (the shipped one without), read once per process."""
    if path is None:
        text, source = files(__package__).joinpath(SHIPPED).read_text(encoding="utf-8"), SHIPPED
    else:
        try:
            text, source = Path(path).expanduser().read_text(encoding="utf-8"), path
        except OSError as e:
            raise ConfigError(f"ranker model {path}: {e.strerror or e}") from None
    try:
        model = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"ranker model {source}: not JSON ({e})") from None
    if not isinstance(model, dict):
        raise ConfigError(f"ranker model {source}: not a model file (a JSON object)")
    return LinearRanker.parse(model, source)


RANKERS = ("learned", "fused")


def get_ranker(name: str, model: str | None = None) -> Ranker:
    """The ranker `name`; `model`: the learned ranker's weights file (the shipped one without)."""
    if name == "learned":
        return load_model(model)
    if name == "fused":
        return FusedRanker()
    raise ConfigError(f"unknown ranker {name!r}; valid: {', '.join(RANKERS)}")
