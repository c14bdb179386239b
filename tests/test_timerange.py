from datetime import datetime, timedelta, timezone

import pytest

from semhist.pipeline.timerange import parse_time_range

JST = timezone(timedelta(hours=9))
ANCHOR = datetime(2025, 7, 29, 10, 41, tzinfo=JST)  # a Tuesday


@pytest.mark.parametrize("request_text,start,end,rest", [
    ("5月8日に話したこと", "2025-05-08T00:00", "2025-05-09T00:00", "に話したこと"),
    ("先週の火曜日に話したことは？", "2025-07-22T00:00", "2025-07-23T00:00", "に話したことは?"),
    ("昨日の午後に何を話した？", "2025-07-28T12:00", "2025-07-29T00:00", "の に何を話した?"),
    ("2023年5月8日の会話", "2023-05-08T00:00", "2023-05-09T00:00", "の会話"),
    ("3日前の話", "2025-07-26T00:00", "2025-07-27T00:00", "の話"),
    ("What did Caroline and Melanie talk about on 8 May 2023? Summarize it.", "2023-05-08T00:00",
     "2023-05-09T00:00", "What did Caroline and Melanie talk about on ? Summarize it."),
    ("what did we talk about last week", "2025-07-21T00:00", "2025-07-28T00:00", "what did we talk about"),
    ("What did we discuss on May 8th, 2023?", "2023-05-08T00:00", "2023-05-09T00:00", "What did we discuss on ?"),
    ("yesterday morning", "2025-07-28T05:00", "2025-07-28T12:00", ""),
    ("in March 2024", "2024-03-01T00:00", "2024-04-01T00:00", ""),
    ("last Friday", "2025-07-25T00:00", "2025-07-26T00:00", ""),
    # an hour of the day: the conversations that started in it
    ("5月8日の21時台に話した内容", "2025-05-08T21:00", "2025-05-08T22:00", "の に話した内容"),
    ("昨日の午後9時ごろの話", "2025-07-28T21:00", "2025-07-28T22:00", "の の話"),
    ("先週の火曜の10時に何を決めた？", "2025-07-22T10:00", "2025-07-22T11:00", "の に何を決めた?"),
    ("What did we talk about on May 8, 2024 at 9 pm?", "2024-05-08T21:00", "2024-05-08T22:00",
     "What did we talk about on ?"),
    ("yesterday around 21:30", "2025-07-28T21:00", "2025-07-28T22:00", ""),
    ("May 8 at 12 am", "2025-05-08T00:00", "2025-05-08T01:00", ""),
    ("5月8日に3時間話した件", "2025-05-08T00:00", "2025-05-09T00:00", "に3時間話した件"),  # a duration, no hour
])
def test_time_expressions(request_text, start, end, rest):
    rng, remaining = parse_time_range(request_text, ANCHOR)
    assert rng.start == datetime.fromisoformat(start).replace(tzinfo=JST)
    assert rng.end == datetime.fromisoformat(end).replace(tzinfo=JST)
    assert remaining == rest


def test_relative_dates_follow_the_thread_not_the_wall_clock():
    later = ANCHOR + timedelta(days=400)
    a, _ = parse_time_range("昨日のこと", ANCHOR)
    b, _ = parse_time_range("昨日のこと", later)
    assert b.start - a.start == timedelta(days=400)


def test_a_date_without_year_is_never_in_the_future():
    rng, _ = parse_time_range("12月24日の話", ANCHOR)
    assert rng.start.year == 2024


@pytest.mark.parametrize("text", ["ラーメンの話題について要約してください。", "What did Caroline research?",
                                  "三日前", "the 5 best ramen shops"])
def test_no_time_named(text):
    assert parse_time_range(text, ANCHOR) == (None, text)


def test_without_an_anchor_only_absolute_dates_resolve():
    assert parse_time_range("昨日の話", None)[0] is None
    assert parse_time_range("2023-05-08 の話", None)[0].start.date().isoformat() == "2023-05-08"
