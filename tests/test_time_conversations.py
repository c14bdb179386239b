"""A request that names a time takes the conversations that started in it to their end: a
conversation ends at a pause (the segmentation gap), not where a block was cut for its size;
with room left, the conversations around the time come before unrelated talk."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from semhist.indexers.loader import loads
from semhist.kernel.model import Thread
from semhist.kernel.budget import Budget
from semhist.kernel.settings import Settings

SUBJECTS = ["ラーメン", "温泉", "Python", "映画", "天気", "引っ越し", "サッカー", "料理"]
FILLER = "について、詳しく順番に説明してもらえると本当に助かりますので、どうぞよろしくお願いします。"


def _rows(start: str, subject: str, length: int, spacing: int = 20, long: bool = False) -> list[dict]:
    t0 = datetime.fromisoformat(start)
    return [{"role": "user" if i % 2 == 0 else "assistant",
             "content": f"{subject}の話、その{i + 1}" + (FILLER if long else "。"),
             "timestamp": (t0 + timedelta(seconds=spacing * i)).isoformat()} for i in range(length)]


def _thread(*parts: list[dict]) -> Thread:
    return loads(json.dumps([r for part in parts for r in part], ensure_ascii=False)).only()


def _others(days: int = 12, month: str = "2025-08") -> list[list[dict]]:
    """Talk on other days, a conversation a day at 09:00."""
    return [_rows(f"{month}-{d:02d}T09:00:00+09:00", SUBJECTS[d % len(SUBJECTS)], 6) for d in range(1, days + 1)]


def _evening(day: str) -> list[list[dict]]:
    """20:00 (映画), 21:40 (ラーメン, 80 long messages 20 s apart: past 22:00 and cut by size into
    several blocks), 22:40 (温泉)."""
    return [_rows(f"{day}T20:00:00+09:00", "映画", 6), _rows(f"{day}T21:40:00+09:00", "ラーメン", 80, long=True),
            _rows(f"{day}T22:40:00+09:00", "温泉", 6)]


@pytest.fixture(scope="module")
def hour_thread():
    """An evening (`_evening`), then twelve other days."""
    return _thread(*_evening("2025-07-20"), *_others())


TARGET = range(6, 86)  # the ラーメン conversation


def _groups(result) -> list[set[int]]:
    return [set(r.message_ids) for r in result.prompt.selection.retrieved]


def test_a_conversation_cut_by_size_goes_on_to_the_pause(engine, hour_thread):
    index = engine.index(hour_thread)
    cut = [b for b in index.blocks if set(b.message_ids) <= set(TARGET)]
    assert len(cut) >= 3  # the 80 messages are several blocks: the test is about the size cuts
    # under the whole thread's 5,750 tokens: a thread that fits is sent whole, nothing retrieved
    result = engine.ask(hour_thread, "7月20日の21時台に話した内容をまとめてください。", budget=Budget.parse("5000"))
    groups = _groups(result)
    assert groups[0] == set(range(6, 66))  # 21:40 to 21:59:40, first
    assert groups[1] == set(range(66, 86))  # then on past 22:00 across the size cuts, to the pause


def test_too_big_a_conversation_comes_from_its_start(engine, hour_thread):
    result = engine.ask(hour_thread, "7月20日の21時台に話した内容をまとめてください。", budget=Budget.parse("2000"))
    first = sorted(result.prompt.selection.retrieved[0].message_ids)
    assert first == list(range(6, 6 + len(first))) and 10 < len(first) < 60  # its start, as much as fits


def test_room_left_goes_to_the_conversations_around_the_time(engine):
    thread = _thread(_rows("2025-07-20T20:00:00+09:00", "映画", 6), _rows("2025-07-20T21:10:00+09:00", "ラーメン", 6),
                     _rows("2025-07-20T22:30:00+09:00", "温泉", 6), *_others(16))
    result = engine.ask(thread, "7月20日の21時台に話した内容をまとめてください。", budget=Budget.parse("40%"))
    groups = _groups(result)
    assert groups[0] == set(range(6, 12))  # the hour's own
    assert groups[1] == set(range(0, 6)) and groups[2] == set(range(12, 18))  # just before, just after
    # the same hour asked with a topic: its search comes next, not the conversations around
    topic = engine.ask(thread, "7月20日の21時台のPythonの話をまとめてください。", budget=Budget.parse("40%"))
    assert _groups(topic)[0] == set(range(6, 12)) and _groups(topic)[1] != set(range(0, 6))


def test_nothing_said_in_the_named_hour_gives_the_talk_around_it(engine):
    thread = _thread(_rows("2025-07-20T20:00:00+09:00", "映画", 6), _rows("2025-07-20T23:10:00+09:00", "温泉", 6),
                     *_others(16))
    result = engine.ask(thread, "7月20日の21時台に話した内容をまとめてください。", budget=Budget.parse("40%"))
    assert _groups(result)[:2] == [set(range(0, 6)), set(range(6, 12))]


@pytest.fixture()
def long_history(tmp_path, cache_dir):
    """A stored thread longer than `view_limit`: requests read it through candidate views."""
    from semhist import History

    h = History(Settings.load(env={}, cache_dir=cache_dir, data_dir=tmp_path / "data",
                              db=f"sqlite:///{tmp_path / 'db.sqlite3'}", view_limit=100), llm=None)
    yield h
    h.close()


def test_a_long_thread_view_holds_the_conversation_past_the_hour(long_history):
    thread = _thread(*_others(20), *_evening("2025-09-20"), *_others(12, month="2025-10"))
    long_history.ingest("long", thread)
    result = long_history.ask("long", "9月20日の21時台に話した内容をまとめてください。", budget=Budget.parse("6000"))
    assert len(result.thread.messages) < len(thread.messages)  # a view, not the whole thread
    target = {m.content for m in thread.messages if m.content.endswith(FILLER)}  # the 21:40 conversation
    taken = [{result.thread.messages[p].content for p in r.message_ids} for r in result.prompt.selection.retrieved]
    assert taken[0] | taken[1] == target  # from 21:40 past 22:00 (only 21:xx was read), first


# -- a named day on the clocks of the people who talked then ---------------------------------
def _two_zones() -> list[list[dict]]:
    """An English team's evening talk stamped in UTC (19:30 on 23 August: 04:30 on the 24th in
    Tokyo), days of it around, then months of the Japanese team's talk in +09:00, which ends
    the thread (a request's days are read on the last message's clock)."""
    english = [[{"role": "user" if i % 2 == 0 else "assistant", "name": "Alice" if i % 2 == 0 else "Bob",
                 "content": f"{subject} plans, part {i + 1}.",
                 "timestamp": (datetime.fromisoformat(f"2025-08-{day:02d}T19:30:00+00:00")
                               + timedelta(seconds=30 * i)).isoformat()} for i in range(6)]
               for day, subject in ((22, "Budget"), (23, "Garden"), (24, "Travel"))]
    return english + _others(12, "2025-10")


@pytest.mark.parametrize("view_limit", [10_000, 30], ids=["whole", "view"])
def test_a_named_day_is_the_day_on_the_clocks_of_its_talk(cache_dir, tmp_path, view_limit):
    from semhist import Engine

    thread = _thread(*_two_zones())
    garden = {p for p, m in enumerate(thread.messages) if m.content.startswith("Garden")}
    engine = Engine(Settings.load(env={}, cache_dir=cache_dir, data_dir=tmp_path, view_limit=view_limit), llm=None)
    try:
        result = engine.ask(thread, "What did we talk about on 23 August 2025?", budget=Budget.parse("400"))
        first = result.prompt.selection.retrieved[0]
        assert {result.thread.messages[p].index for p in first.message_ids} == garden
        assert result.keywords.time_range.start.isoformat() == "2025-08-23T00:00:00+00:00"
    finally:
        engine.close()


def test_a_day_counted_back_stays_on_the_askers_clock(cache_dir, tmp_path):
    """"Today" and "yesterday" count back from the last message on its clock; a named date
    whose talk is on the asker's clock stays there, whatever another zone wrote the day before."""
    from semhist import Engine

    thread = _thread([{"role": "user", "name": "Alice", "content": "Garden plans from London.",
                       "timestamp": "2025-10-09T14:00:00+00:00"}],
                     [{"role": "user", "name": "Taro", "content": "Budget plans from Tokyo.",
                       "timestamp": "2025-10-10T08:00:00+09:00"}])
    engine = Engine(Settings.load(env={}, cache_dir=cache_dir, data_dir=tmp_path), llm=None)
    try:
        for request in ("What did we talk about today?", "What did we talk about on 10 October 2025?"):
            span = engine.ask(thread, request, budget=Budget.parse("400")).keywords.time_range
            assert span.start.isoformat() == "2025-10-10T00:00:00+09:00", (request, span)
        span = engine.ask(thread, "What did we talk about yesterday?", budget=Budget.parse("400")).keywords.time_range
        assert span.start.isoformat() == "2025-10-09T00:00:00+09:00"
    finally:
        engine.close()
