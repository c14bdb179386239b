"""Answers scored the way the field scores memory systems.

- `answer_f1`: LoCoMo's token F1 (its normalisation: commas, articles and "and" removed,
  punctuation stripped, lower case, Porter stems; a multi-hop gold answer is split on commas
  and each part scored against the best part of the answer).
- `judge`: an LLM grades the answer against the gold answer, CORRECT or WRONG (the J score of
  LoCoMo/LongMemEval reports); JUDGE_PROMPT is the whole instruction.
- `coverage`: for requests without a short gold answer ("what did we say about X"), the share
  of the gold evidence's names, numbers and times that the answer contains.
- `prefix_reuse`: the share of a prompt's tokens that repeat the previous prompt's start, what
  a provider's prompt cache would bill at a discount.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from semhist.kernel.errors import BackendError, ConfigError
from semhist.indexers.lexical import _janome, is_japanese
from semhist.kernel.tokens import count_message, count_text

from .pipeline.llmplan import reply_json

JUDGE_PROMPT = (
    "You grade an answer to a question about an earlier conversation. You get the question, "
    "the gold answer and the answer to grade. The answer is CORRECT when it says what the gold "
    "answer says: the same date, name, number or fact, in any wording or format (a relative date "
    "that resolves to the same day counts; extra detail that does not contradict the gold answer "
    "is fine). It is WRONG when it misses the gold answer, contradicts it, or says it does not "
    'know. Reply with JSON only: {"reason": "one short sentence", "label": "CORRECT" or "WRONG"}.'
)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b", re.I)
_PUNCT = set(string.punctuation)


@lru_cache(maxsize=1)
def _stemmer():
    try:
        from nltk.stem import PorterStemmer
    except ImportError:
        raise ConfigError("scoring answers needs nltk (LoCoMo's stemmer): pip install 'semhist[eval]'") from None
    return PorterStemmer()


def _tokens(text: str) -> list[str]:
    text = _ARTICLES.sub(" ", str(text).replace(",", ""))
    text = "".join(ch for ch in text if ch not in _PUNCT).lower()
    stem = _stemmer().stem
    return [stem(w) for w in text.split()]


def token_f1(prediction: str, gold: str) -> float:
    pred, truth = _tokens(prediction), _tokens(gold)
    common = sum((Counter(pred) & Counter(truth)).values())
    if not pred or not truth or not common:
        return 0.0
    precision, recall = common / len(pred), common / len(truth)
    return 2 * precision * recall / (precision + recall)


def answer_f1(prediction: str, gold: str, category: str | None = None) -> float:
    """LoCoMo's F1; multi-hop answers (category 1) part by part."""
    if category == "locomo_cat1":
        parts = [p for p in str(gold).split(",") if p.strip()]
        said = [p for p in prediction.split(",") if p.strip()] or [prediction]
        return sum(max(token_f1(s, p) for s in said) for p in parts) / len(parts) if parts else 0.0
    return token_f1(prediction, gold)


def make_judge(settings: Any) -> Any:
    """The judge's client: the answer endpoint and model unless --judge-model/--judge-base-url
    say otherwise; None for --judge-model none or without any LLM."""
    from dataclasses import replace

    from .llm import make_llm

    if settings.llm is None or (settings.judge_model or "").lower() == "none":
        return None
    config = replace(settings.llm, model=settings.judge_model or settings.llm.model)
    if settings.judge_base_url:
        config = replace(config, provider="openai", base_url=settings.judge_base_url,
                         api_key=settings.judge_api_key or "not-needed")
    elif settings.judge_api_key:
        config = replace(config, api_key=settings.judge_api_key)
    return make_llm(config)


def judge(llm: Any, question: str, gold: str, answer: str) -> bool:
    """True when the judge model grades `answer` CORRECT; BackendError when it cannot say."""
    reply = llm.chat([{"role": "system", "content": JUDGE_PROMPT},
                      {"role": "user", "content": f"Question: {question}\nGold answer: {gold}\n"
                                                  f"Answer to grade: {answer}"}],
                     json_mode=True, max_tokens=80)
    return judge_label(reply, llm.model)


def judge_label(reply: str, model: str = "the judge") -> bool:
    """The judge's `label` (its reason may say "correct" or "wrong" too); the first label word
    after "label" when the reply is not JSON."""
    try:
        data = reply_json(reply)
    except ValueError:
        data = None
    label = str(data.get("label", "")).strip().upper() if isinstance(data, dict) else ""
    if label in ("CORRECT", "WRONG"):
        return label == "CORRECT"
    found = re.search(r"label\W*(CORRECT|WRONG)\b", reply, re.I) or re.fullmatch(r"\W*(CORRECT|WRONG)\W*", reply, re.I)
    if not found:
        raise BackendError(f"{model} gave no label: {reply[:80]!r}")
    return found.group(1).upper() == "CORRECT"


_NUMBER = re.compile(r"\d+(?:[.:]\d+)*")
_CAPITALISED = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-zA-Z'\-]+(?:\s+[A-Z][a-zA-Z'\-]+)*")
_KATAKANA = re.compile(r"[ァ-ヴー・]{2,}")


def salient(text: str) -> set[str]:
    """Names, numbers and times in `text` (what an answer about it should carry)."""
    text = unicodedata.normalize("NFKC", text)
    found = set(_NUMBER.findall(text))
    if is_japanese(text):
        found |= set(_KATAKANA.findall(text))
        found |= {t.surface for t in _janome().tokenize(text)
                  if t.part_of_speech.startswith("名詞,固有名詞") and len(t.surface) > 1}
    else:
        found |= {m for m in _CAPITALISED.findall(text) if m.lower() not in ("i", "i'm", "i've", "i'll")}
    return {f for f in found if f.strip()}


def coverage(answer: str, evidence: Sequence[str]) -> float | None:
    """The share of the evidence's names, numbers and times found in the answer; None when the
    evidence has none."""
    wanted = set().union(*(salient(t) for t in evidence)) if evidence else set()
    if not wanted:
        return None
    said = unicodedata.normalize("NFKC", answer).casefold()
    return sum(w.casefold() in said for w in wanted) / len(wanted)


def _said(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else repr(content)


def prefix_reuse(previous: Sequence[dict[str, Any]] | None, current: Sequence[dict[str, Any]]) -> float:
    """The share of `current`'s tokens in the longest start it shares with `previous`."""
    total = sum(count_message(m) for m in current)
    if not previous or not total:
        return 0.0
    shared = 0
    for before, now in zip(previous, current):
        if before == now:
            shared += count_message(now)
            continue
        if before.get("role") == now.get("role"):
            a, b = _said(before), _said(now)
            n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            shared += count_text(b[:n])
        break
    return min(1.0, shared / total)
