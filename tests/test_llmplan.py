"""The checks on the LLM's reading of a request: replies are what the packaged model actually
said on the benchmark requests (benchmarks/llm_request.py), fed through the same code."""

import json
from datetime import datetime, timezone

import pytest

from semhist.pipeline.keyword import local_plan
from semhist.pipeline.llmplan import checked, grounded
from semhist.pipeline.timerange import names_time

ANCHOR = datetime(2023, 10, 22, 20, 0, tzinfo=timezone.utc)


def plan(request: str, reply: str):
    return checked(local_plan(request, ANCHOR), reply, request, ANCHOR, "test-model")


def test_a_time_range_for_a_request_that_names_no_time_is_rejected():
    kw = plan("When did Caroline go to the LGBTQ support group?",
              '{"keywords": ["Caroline", "LGBTQ support group", "date"], "intent": "topic", '
              '"time": {"start": "2023-10-22", "end": "2023-10-22"}}')
    assert kw.time_range is None
    assert kw.keywords == ("Caroline", "LGBTQ support group")  # "date" is about the question
    assert kw.intent == "fact" and kw.origin["intent"] == "local"
    assert any("names no time" in r for r in kw.rejected) and any("intent 'topic'" in r for r in kw.rejected)
    assert kw.dense_text == "When did Caroline go to the LGBTQ support group?"  # the sentence, as locally


def test_a_time_the_local_parser_cannot_read_comes_from_the_llm():
    kw = plan("三日前に話した映画のことを教えて", '{"keywords": ["映画"], "time": {"start": "2023-10-19", "end": "2023-10-19"}}')
    assert kw.time_range is not None and kw.time_range.start.day == 19 and kw.origin["time"] == "llm"


def test_the_local_parse_of_a_time_wins_and_a_date_is_no_keyword():
    kw = plan("10月15日にタクシーについて話した内容を教えて。",
              '{"keywords": ["タクシー", "10月15日"], "time": {"start": "2023-10-01", "end": "2023-10-22"}}')
    assert kw.time_range.start.day == 15 and kw.time_range.end.day == 16 and kw.origin["time"] == "local"
    assert kw.keywords == ("タクシー",) and any("a time, not a topic" in r for r in kw.rejected)


def test_words_not_in_the_request_are_expansions_beside_its_own_words():
    kw = plan("What did we decide about the Hong Kong server?",
              '{"keywords": ["data center", "Hong Kong servers"]}')
    assert kw.keywords == ("Hong Kong servers",) and kw.origin["expansions"] == "llm"
    assert "data center" in kw.search_text and "Hong Kong server" in kw.search_text


def test_nothing_grounded_keeps_the_local_keywords():
    kw = plan("おすすめのラーメン屋を教えてください", '{"keywords": ["麺類"]}')
    assert kw.keywords == local_plan("おすすめのラーメン屋を教えてください", ANCHOR).keywords
    assert kw.origin["keywords"] == "local" and "麺類" in kw.search_text


@pytest.mark.parametrize("keyword,request_text,expected", [
    ("Hong Kong server", "What did we decide about the Hong Kong servers?", True),
    ("decision", "What did we decide?", True),
    ("data center", "What did we decide about the Hong Kong server?", False),
    ("ラーメン屋", "おすすめのラーメン屋さんは？", True),
    ("ＬＧＢＴＱ", "lgbtq support", True),
    ("麺類", "おすすめのラーメン屋を教えてください", False),
])
def test_grounded(keyword, request_text, expected):
    assert grounded(keyword, request_text) is expected


@pytest.mark.parametrize("text,expected", [
    ("When did Caroline go to the LGBTQ support group?", False),
    ("What did we decide about the Hong Kong server?", False),
    ("May I ask about dogs?", False),
    ("the sun is out", False),
    ("おすすめのラーメン屋を教えてください", False),
    ("三日前に話した映画のことを教えて", True),
    ("去年の夏の話", True),
    ("What did we do two months ago?", True),
    ("What did Melanie paint in 2022?", True),
    ("the 8th of may", True),
    ("Summarize what we said about lunch on Friday.", True),
    ("What did we discuss about ramen in May?", True),
    ("What did Mel paint in summer?", True),
    ("What happened in early 2022?", True),
    ("What did we say on 5/8?", True),
    ("先々月の話", True), ("おととしの旅行", True), ("夏休みの予定", True),
    ("一時的な問題でした", False),
    ("the top 5 may be wrong", False),
])
def test_names_time(text, expected):
    assert names_time(text) is expected


@pytest.mark.parametrize("request_text,reply_time,kept", [
    ("When did Melanie go camping in June?", ("2023-10-22", "2023-10-22"), False),  # the anchor's day
    ("What happened to John's job situation in 2022?", ("2023-10-01", "2023-10-05"), False),  # not in 2022
    ("What happened to John's job situation in 2022?", ("2022-01-01", "2022-12-31"), True),
    ("6月に話したキャンプのこと", ("2023-06-01", "2023-06-30"), True),
    ("6月に話したキャンプのこと", ("2023-09-01", "2023-09-30"), False),
    ("三日前に話した映画のことを教えて", ("2023-10-19", "2023-10-19"), True),
    ("What may Mel have painted last summer?", ("2023-06-01", "2023-08-31"), True),  # "may" is no month here
    ("What did we say in May?", ("2023-09-01", "2023-09-30"), False),
])
def test_a_named_time_must_match_the_models_range(request_text, reply_time, kept):
    reply = json.dumps({"keywords": ["x"], "time": {"start": reply_time[0], "end": reply_time[1]}})
    kw = plan(request_text, reply)
    assert (kw.origin.get("time") == "llm") is kept, kw.rejected
