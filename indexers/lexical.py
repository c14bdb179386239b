"""Lexical side of search: language-aware tokens and a small BM25 index.

Japanese text (detected per message by its script) is cut by janome into content words
(nouns, verbs and adjectives in their base form); other text into lower-cased words reduced
by the Snowball English stemmer. Meta-words of requests (履歴, 要約, "summarize"...) and
English stopwords never count as evidence.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np

_JA_CHARS = re.compile(r"[\u3040-\u30ff\u3400-\u9fff]")
_WORD = re.compile(r"[A-Za-z0-9]+")

JA_META = frozenset("""
履歴 話題 要約 会話 内容 まとめ 話 件 こと もの 前 以前 今 さっき 先ほど ところ 感じ 何 なに どこ
いつ 誰 どれ どんな 教え 説明 トーク チャット やりとり やり取り 質問 回答 返事 今回 最近 について 関連
相談 まとめる 探す 振り返る する いる ある なる できる 言う いう 聞く 話す 教える 思う 知る 覚える くれる もらう れる られる せる ない よう
""".split())

EN_STOP = frozenset("""
a an the and or but if of to in on at by for with about from into over after before as is are was were
be been being do does did have has had i me my we our you your he she it its they them their this that
these those what which who whom whose when where why how all any some can could would should will shall
may might must not no yes so than then there here just also again ever please tell us let lets ok okay
recap summarize summarise summary history conversation conversations chat talk talked talking discuss
discussed discussion said say says mention mentioned topic topics earlier previously remind recall
remember thread messages message back know anything everything something thing things up out
decide decided agree agreed s t her his him hers she he mine yours ours theirs
""".split())


def is_japanese(text: str) -> bool:
    return bool(_JA_CHARS.search(text))


@lru_cache(maxsize=1)
def _janome():
    from janome.tokenizer import Tokenizer

    return Tokenizer()


@lru_cache(maxsize=1)
def _stemmer():
    import snowballstemmer

    return snowballstemmer.stemmer("english")


def _japanese_words(text: str) -> list[str]:
    out = []
    for tok in _janome().tokenize(text):
        pos = tok.part_of_speech.split(",")
        if pos[0] in ("名詞", "動詞", "形容詞") and pos[1] not in ("非自立", "代名詞", "数", "接尾"):
            word = tok.base_form if tok.base_form != "*" else tok.surface
            if word not in JA_META:
                out.append(word.lower())
    # Latin words inside Japanese text ("Pythonで") are stemmed like English ones
    return out


def tokenize(text: str) -> list[str]:
    """Index terms of one text, by its own language."""
    if is_japanese(text):
        return _japanese_words(text)
    stem = _stemmer().stemWord
    return [stem(w) for w in (x.lower() for x in _WORD.findall(text)) if w not in EN_STOP]


class BM25:
    """Okapi BM25 over pre-tokenized documents (k1=1.2, b=0.75)."""

    def __init__(self, docs: Sequence[Sequence[str]], k1: float = 1.2, b: float = 0.75):
        self.n = len(docs)
        lengths = np.array([len(d) for d in docs], dtype=np.float32)
        avg = float(lengths.mean()) if self.n and lengths.mean() > 0 else 1.0
        self._k1, self._b, self._avg, self._lengths = k1, b, avg, lengths
        self._postings: dict[str, list[tuple[int, int]]] = {}
        for i, doc in enumerate(docs):
            for term, tf in Counter(doc).items():
                self._postings.setdefault(term, []).append((i, tf))
        # weights are computed for the terms a query asks for, when it asks: a query has a
        # handful of terms, a thread view thousands (built per request for long threads)
        self._terms: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def _weights(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        if term not in self._terms:
            plist = self._postings.get(term)
            if plist is None:
                return None
            ids = np.fromiter((i for i, _ in plist), dtype=np.int64, count=len(plist))
            tf = np.fromiter((t for _, t in plist), dtype=np.float32, count=len(plist))
            idf = math.log(1 + (self.n - len(plist) + 0.5) / (len(plist) + 0.5))
            k1, b = self._k1, self._b
            weight = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * self._lengths[ids] / self._avg))
            self._terms[term] = (ids, weight.astype(np.float32))
        return self._terms[term]

    def scores(self, query_terms: Iterable[str]) -> np.ndarray:
        out = np.zeros(self.n, dtype=np.float32)
        for term in set(query_terms):
            hit = self._weights(term)
            if hit is not None:
                out[hit[0]] += hit[1]
        return out
