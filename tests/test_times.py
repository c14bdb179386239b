"""Every public call that takes a time takes the same forms (a datetime, ISO 8601 text, epoch
seconds; without a zone, the settings' one) and refuses anything else with an InputError naming
its argument. `History.add(timestamp="2031-...")` ended in an AttributeError from inside the
facade while `add_many` stored the same text."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest

from semhist import Engine, History, InputError, Message, Settings, build_thread
from semhist.kernel.validate import resolve_zone

TOKYO = timezone(timedelta(hours=9))
MOMENT = datetime(2031, 1, 1, 1, 0, tzinfo=timezone.utc)  # 10:00 in Tokyo, the settings' zone below
FORMS = {
    "aware datetime": datetime(2031, 1, 1, 10, 0, tzinfo=TOKYO),
    "ISO text": "2031-01-01T10:00:00+09:00",
    "naive datetime": datetime(2031, 1, 1, 10, 0),
    "naive ISO text": "2031-01-01T10:00:00",
    "epoch seconds": MOMENT.timestamp(),
}
REFUSED = {"a date": date(2031, 1, 1), "words": "soon-ish", "a list": [2031], "a boolean": True, "empty text": " "}


@pytest.fixture(scope="module")
def settings(tmp_path_factory, cache_dir) -> Settings:
    base = tmp_path_factory.mktemp("times")
    return Settings.load(env={}, cache_dir=cache_dir, data_dir=base, db=f"sqlite:///{base / 'db.sqlite3'}",
                         timezone="Asia/Tokyo")


@pytest.fixture(scope="module")
def history(settings):
    h = History(settings, llm=None)
    yield h
    h.close()


def stored_time(history: History, thread_id: str) -> datetime:
    (message,) = history.store.messages(thread_id)
    return message.timestamp


@pytest.mark.parametrize("form", FORMS, ids=str)
def test_add_takes_every_form(history, form):
    thread = f"add-{form.replace(' ', '-')}"
    history.add(thread, "user", "the launch is on Friday", timestamp=FORMS[form])
    assert stored_time(history, thread) == MOMENT


@pytest.mark.parametrize("form", FORMS, ids=str)
def test_add_many_takes_every_form(history, form):
    thread = f"many-{form.replace(' ', '-')}"
    history.add_many(thread, [{"role": "user", "content": "the launch is on Friday", "timestamp": FORMS[form]}])
    assert stored_time(history, thread) == MOMENT


@pytest.mark.parametrize("form", FORMS, ids=str)
def test_forget_before_takes_every_form(history, form):
    thread = f"forget-{form.replace(' ', '-')}"
    history.add(thread, "user", "an hour early", timestamp=MOMENT - timedelta(hours=1))
    history.add(thread, "user", "an hour late", timestamp=MOMENT + timedelta(hours=1))
    assert history.forget(thread, before=FORMS[form]) == 1
    assert [m.content for m in history.store.messages(thread)] == ["an hour late"]


@pytest.mark.parametrize("form", FORMS, ids=str)
def test_build_thread_takes_every_form(form):
    thread, _ = build_thread("t", [{"role": "user", "content": "hi", "timestamp": FORMS[form]}],
                             zone=resolve_zone("Asia/Tokyo"), lenient=False)
    assert thread.messages[0].timestamp == MOMENT


def test_the_issue_s_two_calls_store_the_same_moment(history):
    text = "2031-01-01T10:00:00+09:00"
    history.add_many("issue-54", [{"role": "user", "content": "first", "timestamp": text}])
    history.add("issue-54", "user", "second", timestamp=text)
    assert [m.timestamp for m in history.store.messages("issue-54")] == [MOMENT, MOMENT]


def test_an_engine_takes_them_as_history_does(settings):
    engine = Engine(settings, llm=None)
    try:
        engine.add("e", "user", "early", timestamp="2031-01-01T09:00:00+09:00")
        engine.add("e", "user", "late", timestamp=datetime(2031, 1, 1, 11, 0))
        assert engine.forget("e", before="2031-01-01T10:00:00") == 1
        with pytest.raises(InputError) as refused:
            engine.add("e", "user", "x", timestamp=date(2031, 1, 1))
        assert refused.value.field == "timestamp"
    finally:
        engine.close()


@pytest.mark.parametrize("value", REFUSED.values(), ids=list(REFUSED))
def test_each_call_refuses_what_is_not_a_time_naming_its_argument(history, value):
    with pytest.raises(InputError, match="^timestamp: ") as add:
        history.add("refused", "user", "x", timestamp=value)
    assert add.value.field == "timestamp"
    with pytest.raises(InputError, match="^before: ") as forget:
        history.forget("refused", before=value)
    assert forget.value.field == "before"
    with pytest.raises(InputError, match="field 'timestamp'") as many:
        history.add_many("refused", [{"role": "user", "content": "x", "timestamp": value}])
    assert many.value.field == "timestamp" and many.value.index == 0
    assert not history.store.has_thread("refused")  # nothing was stored by any of them


def test_a_message_object_refuses_text_for_its_time():
    """A Message has no zone to read text on: load, build_thread and History.add read text."""
    assert Message(0, "user", "hi", MOMENT).timestamp == MOMENT
    with pytest.raises(InputError, match="timestamp must be a datetime") as made:
        Message(0, "user", "hi", "2031-01-01T10:00:00+09:00")
    assert made.value.field == "timestamp"
