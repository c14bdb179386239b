"""Hybrid retrieval, time-aware requests, budget packing and online segmentation."""

import json
from datetime import datetime, timedelta

import numpy as np
import pytest

from semhist.kernel.model import Thread, embedding_text
from semhist.indexers.loader import load, loads
from semhist.indexers.segment import TilingSegmenter, TimeGapSegmenter, TopicSegmenter
from semhist.indexers.segmodel import LearnedSegmenter
from semhist.kernel.budget import Budget
from tests.conftest import SHARED_DATA

DAYS = {
    "2025-07-27": ["おすすめのラーメン屋は？", "一蘭のとんこつラーメンが人気です。", "トッピングは？", "半熟卵とチャーシューです。"],
    "2025-07-28": ["週末に箱根へ行きます。天気は？", "晴れの予報です。", "温泉のおすすめは？", "強羅温泉がおすすめです。"],
    "2025-07-29": ["Pythonの勉強方法は？", "小さなプログラムから始めましょう。", "おすすめの本は？", "入門書から読みましょう。"],
}


@pytest.fixture(scope="module")
def days_thread():
    rows = []
    for day, texts in DAYS.items():
        for i, text in enumerate(texts):
            rows.append({"role": "user" if i % 2 == 0 else "assistant", "content": text,
                         "timestamp": f"{day}T10:0{i}:00+09:00"})
    return loads(json.dumps(rows)).only()


def test_a_named_day_is_taken_first(engine, days_thread):
    result = engine.ask(days_thread, "昨日話したことをまとめて")
    assert result.keywords.time_range is not None
    assert set(range(4, 8)) <= result.included  # 2025-07-28, the day before the last message
    assert result.prompt.selection.retrieved[0].message_ids[0] == 4  # first, before any search hit


def _sittings(starts: list[str], length: int = 6, spacing: int = 30) -> Thread:
    """Conversations that each start at one of `starts` (ISO times) and run `length` messages
    `spacing` seconds apart; each talks of its own subject."""
    subjects = ["ラーメン", "温泉", "Python", "映画", "天気", "引っ越し"]
    rows = []
    for n, start in enumerate(starts):
        t0 = datetime.fromisoformat(start)
        for i in range(length):
            rows.append({"role": "user" if i % 2 == 0 else "assistant",
                         "content": f"{subjects[n % len(subjects)]}の話、その{i + 1}。",
                         "timestamp": (t0 + timedelta(seconds=spacing * i)).isoformat()})
    return loads(json.dumps(rows)).only()


def test_an_hour_means_the_conversations_that_started_in_it_to_their_end(engine):
    # 20:50 runs into 21:xx (not asked for); 21:55 runs past 22:00 (asked for, to its end)
    thread = _sittings(["2025-07-20T20:58:00+09:00", "2025-07-20T21:20:00+09:00", "2025-07-20T21:57:00+09:00",
                        "2025-07-21T09:00:00+09:00", "2025-07-22T09:00:00+09:00"])
    result = engine.ask(thread, "7月20日の21時台に話した内容を教えて。")
    assert result.keywords.time_range.start.hour == 21
    groups = result.prompt.selection.retrieved
    hour = [r for r in groups if set(r.message_ids) <= set(range(6, 18))]
    assert set(range(6, 18)) <= {p for r in hour for p in r.message_ids}  # both that started at 21:xx, whole
    # the one that started at 20:58 is not the hour's, though it ran past 21:00: it may come
    # only after, as the talk just before the hour
    assert all(r.rank > max(h.rank for h in hour) for r in groups if set(r.message_ids) & set(range(0, 6)))


def test_a_conversation_too_big_for_the_budget_comes_from_its_start(engine):
    thread = _sittings(["2025-07-20T21:00:00+09:00", *(f"2025-08-{d:02d}T09:00:00+09:00" for d in range(1, 21))],
                       length=12)
    result = engine.ask(thread, "7月20日の21時台に話した内容を教えて。", budget=Budget.parse("7%"))
    retrieved = sorted(p for r in result.prompt.selection.retrieved for p in r.message_ids if p < 12)
    assert 0 < len(retrieved) < 12 and retrieved == list(range(len(retrieved)))  # its start, not nothing


def test_time_words_are_not_searched_as_a_topic(engine, days_thread):
    kw = engine.parts.asker.keywords("先週の火曜日のラーメンの話をまとめて", days_thread.last_time)
    assert kw.keywords == ("ラーメン",) and "先週" not in kw.search_text


def test_fact_question_gets_the_hit_with_its_neighbours(engine, english):
    result = engine.ask(english, "How do I get to Beppu from Tokyo?")
    assert result.keywords.intent == "fact"
    assert {26, 27} <= result.included  # the question and the answer after it


def test_a_question_found_in_the_history_comes_with_its_answer(engine, ramen):
    # 「ラーメンのトッピングは？」 hits the earlier question 「おすすめのトッピングは？」 (20) at the
    # edge of a window and of a block; its answer (21) used to be left out.
    result = engine.ask(ramen, "ラーメンのトッピングは？")
    assert {20, 21} <= result.included
    for group in result.prompt.selection.retrieved:
        assert ramen.messages[group.message_ids[-1]].role != "user" or group.message_ids[-1] + 1 in result.included


def test_the_one_author_a_request_names_is_not_searched_as_a_word(engine):
    from semhist.indexers.lexical import tokenize
    from semhist.pipeline.search import searched_terms

    rows = [{"role": "user", "name": "Caroline", "content": "Thanks, Melanie! The pottery class sounds great."},
            {"role": "assistant", "name": "Melanie", "content": "I go swimming with the kids to relax."}]
    index = engine.index(loads(json.dumps(rows)).only())
    melanie = tokenize("Melanie")[0]
    assert searched_terms(index, tokenize("What does Melanie do to relax?")) == tokenize("What does do to relax?")
    both = tokenize("When did Caroline and Melanie meet?")
    assert searched_terms(index, both) == both  # two people named: the names choose nothing apart
    assert melanie in searched_terms(engine.index(loads(json.dumps(
        [{**r, "name": None} for r in rows])).only()), tokenize("What does Melanie do?"))
    # one author with a name of two words is still one author named
    two_words = engine.index(loads(json.dumps([{**rows[0], "name": "Mary Ann"}, rows[1]])).only())
    assert searched_terms(two_words, tokenize("What did Mary Ann paint?")) == tokenize("What did paint?")
    # a character of a Chinese name alone does not name its author
    zh = engine.index(loads(json.dumps([{**rows[0], "name": "王小明"}, rows[1]])).only())
    assert searched_terms(zh, tokenize("明天去哪儿？")) == tokenize("明天去哪儿？")
    assert not set(tokenize("小明")) & set(searched_terms(zh, tokenize("小明喜欢什么？")))


def test_budget_is_filled_and_never_exceeded(engine, ramen):
    small = engine.ask(ramen, "箱根のおすすめスポットはどこだったっけ？", budget=Budget.parse("30%"))
    large = engine.ask(ramen, "箱根のおすすめスポットはどこだったっけ？", budget=Budget.parse("60%"))
    for r in (small, large):
        assert 0.75 * r.budget_tokens <= r.prompt.tokens <= r.budget_tokens
    assert small.included <= large.included | small.included and len(large.included) > len(small.included)


def test_ramen_topic_without_budget_still_keeps_every_ramen_turn(engine, ramen):
    from tests.conftest import RAMEN_REQUEST, RAMEN_TURNS
    result = engine.ask(ramen, RAMEN_REQUEST)
    assert RAMEN_TURNS <= result.included and result.prompt.tokens <= 0.5 * result.full_tokens


def _vectors(engine, thread):
    return engine.parts.embedder.embed([embedding_text(m) for m in thread.messages])


@pytest.mark.parametrize("segmenter", [TimeGapSegmenter(300, 120), TopicSegmenter(300, 400, percentile=70),
                                       TilingSegmenter(300, 400, percentile=70), LearnedSegmenter(300, 400),
                                       LearnedSegmenter(300, 400, min_tokens=200)])
def test_a_new_message_only_resegments_the_open_tail(engine, ramen, segmenter):
    vectors = _vectors(engine, ramen)
    full = segmenter.segment(ramen.messages, vectors)
    for k in range(10, len(ramen.messages), 7):
        prefix = segmenter.segment(ramen.messages[:k], vectors[:k])
        closed = prefix[:-1]
        assert [b.message_ids for b in closed] == [b.message_ids for b in full[:len(closed)]], k
        assert [b.parts for b in closed] == [b.parts for b in full[:len(closed)]], k


def test_oversized_blocks_are_cut_where_the_topic_drifts(engine):
    rows = [{"role": "user" if i % 2 == 0 else "assistant", "content": t, "timestamp": 1_750_000_000 + 30 * i}
            for i, t in enumerate(["ラーメンが好き", "とんこつですね", "味噌ラーメンも", "札幌が本場です", "塩ラーメンは？",
                                   "函館が有名です", "明日の天気は？", "雨の予報です", "気温は？", "25度です",
                                   "傘は要る？", "持って行きましょう"])]
    thread = loads(json.dumps(rows)).only()
    blocks = TimeGapSegmenter(300, 80).segment(thread.messages, _vectors(engine, thread))
    assert any(b.message_ids[0] == 6 for b in blocks)  # the cut falls between ramen and weather


@pytest.mark.shared_data
def test_topic_sub_segments_are_recorded_and_stored(engine, settings):
    with open(SHARED_DATA / "jmultiwoz_threads.jsonl", encoding="utf-8") as f:
        thread = load.__globals__["loads"](f.readline()).only()
    index = engine.index(thread)
    assert any(len(b.parts) > 1 for b in index.blocks)
    stored = [b.parts for b in engine.store.blocks(engine.put(thread))]
    assert stored == [b.parts for b in index.blocks[:len(stored)]]
    whole = TimeGapSegmenter().segment(thread.messages, _vectors(engine, thread))
    assert [b.parts for b in index.blocks] == [b.parts for b in whole]  # stored in batches = segmented whole


@pytest.mark.slow
@pytest.mark.shared_data
def test_selection_is_fast_on_a_long_thread(engine):
    """The selection step, history indexed: the issue's target is p50 <= 5 ms on 700 messages;
    the bound here is loose so a busy CI machine does not flake, tight enough to catch
    re-embedding or rebuilding per request."""
    import time
    with open(SHARED_DATA / "locomo.jsonl", encoding="utf-8") as f:
        thread = load.__globals__["loads"](f.readline()).only()
    engine.index(thread)
    times = []
    for q in thread.queries[:60]:
        start = time.perf_counter()
        engine.ask(thread, q.text, budget=Budget.parse("10%"))
        times.append((time.perf_counter() - start) * 1000)
    assert float(np.median(times)) < 25


def test_a_thread_asked_again_after_another_version_of_it_is_read_afresh(engine, ramen):
    # The engine stored the edited version under the same id, and asking the first version
    # again answered from the edited one (what a benchmark that varies timestamps did).
    from dataclasses import replace

    edited = replace(ramen, messages=(replace(ramen.messages[0], content="全く別の話です。"), *ramen.messages[1:]))
    for thread in (ramen, edited, ramen):
        stored = engine.store.messages(engine.put(thread))
        assert stored[0].content == thread.messages[0].content
