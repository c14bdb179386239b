""""What did we say about X" when X does not fit: the best stretches verbatim, and a dated line
for every other stretch about X (retrieval/pipeline/listing.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from semhist import Budget
from semhist.pipeline.listing import LISTED_HEADER

REQUEST = "What did we say about the Zanzibar offsite?"


def _thread(stretches: int = 12) -> list[dict]:
    """A Teams-shaped thread: the offsite comes up once a week among other talk."""
    t, rows = datetime(2026, 1, 5, 9, tzinfo=timezone.utc), []
    others = ["the Frankfurt migration", "ramen near the office", "the Q3 budget", "customer churn"]
    for week in range(stretches):
        day = t + timedelta(days=7 * week)
        rows += [{"role": "user", "name": "Hanako Sato", "timestamp": day.isoformat(), "id": f"z{week}a",
                  "content": f"Zanzibar offsite #{week} <b>: the venue needs a deposit of {100 + week} euros "
                             "and someone to check the ferry times."},
                 {"role": "assistant", "timestamp": (day + timedelta(minutes=1)).isoformat(), "id": f"z{week}b",
                  "content": f"Zanzibar offsite #{week} noted: deposit {100 + week} euros, ferry times to check."}]
        for k, topic in enumerate(others):
            at = day + timedelta(days=1, hours=k)
            rows += [{"role": "user", "name": "Taro Yamada", "timestamp": at.isoformat(), "id": f"o{week}{k}a",
                      "content": f"Update on {topic}: nothing new this week, we wait for the numbers."},
                     {"role": "assistant", "timestamp": (at + timedelta(minutes=1)).isoformat(), "id": f"o{week}{k}b",
                      "content": f"Thanks, {topic} stays as it is for now."}]
    return rows


def _offsite_weeks(text: str) -> set[int]:
    import re

    return {int(n) for n in re.findall(r"offsite #(\d+)", text)}


def test_every_stretch_about_the_thing_is_named_when_not_all_fit(make_history):
    h = make_history()
    h.add_many("t", _thread())
    result = h.ask("t", REQUEST, budget=Budget.parse("800"))
    context = next(m["content"] for m in result.prompt.messages if "<retrieved_history>" in str(m["content"]))
    assert result.prompt.tokens <= 800
    shown = context.split(LISTED_HEADER)
    assert len(shown) == 2, context  # some verbatim, the rest as lines
    verbatim, lines = _offsite_weeks(shown[0]), _offsite_weeks(shown[1])
    assert verbatim and lines and not verbatim & lines
    assert verbatim | lines == set(range(12)), (verbatim, lines)  # every stretch named, once
    for line in shown[1].strip().splitlines()[:-1]:  # each line dated, one line, quoted
        assert line.startswith("[2026-") and "Zanzibar offsite" in line and "<b>" not in line
    listed = result.prompt.selection.listed
    assert h.log("t")[-1]["listed"] == [result.thread.messages[p].index for p in listed] and len(listed) == len(lines)
    assert not {result.thread.messages[p].index for p in listed} & {
        result.thread.messages[p].index for p in result.included}  # a line is not a kept message


def test_lines_are_a_choice_and_only_for_topic_requests(make_history):
    h = make_history(list_stretches=False)
    h.add_many("t", _thread())
    off = h.ask("t", REQUEST, budget=Budget.parse("800"))
    assert not off.prompt.selection.listed and LISTED_HEADER not in str(off.prompt.messages)
    on = make_history()
    on.add_many("t", _thread())
    fact = on.ask("t", "How much is the deposit for the Zanzibar venue in week 3?", budget=Budget.parse("800"))
    assert not fact.prompt.selection.listed  # a fact question wants the answer, not a list
    roomy = on.ask("t", REQUEST, budget=Budget.parse("20000"))
    assert not roomy.prompt.selection.listed  # everything fits: nothing to list


def _weeks(stretches: int, others: int, every_week: str = "") -> list[dict]:
    """`stretches` weeks, the offsite once a week and `others` other topics the next day, each
    other topic mentioning `every_week`."""
    t, rows = datetime(2026, 1, 5, 9, tzinfo=timezone.utc), []
    for week in range(stretches):
        day = t + timedelta(days=7 * week)
        rows += [{"role": "user", "name": "Hanako Sato", "timestamp": day.isoformat(), "id": f"z{week}",
                  "content": f"Zanzibar offsite #{week}: the venue needs a deposit of {100 + week} euros, "
                             "and someone has to check the ferry times, the rooms, the meals, the guides "
                             "and the weather for the week before anyone books a flight."}]
        for k in range(others):
            at = day + timedelta(days=1, hours=k)
            rows += [{"role": "user", "name": "Taro Yamada", "timestamp": at.isoformat(), "id": f"o{week}.{k}",
                      "content": f"Update on topic {k}{every_week}: nothing new this week, we wait."}]
    return rows


def _named(make_history, rows: list[dict], budget: str, **settings) -> tuple[int, set[int], set[int]]:
    h = make_history(**settings)
    h.add_many("t", rows)
    result = h.ask("t", REQUEST, budget=Budget.parse(budget))
    context = next((m["content"] for m in result.prompt.messages if "<retrieved_history>" in str(m["content"])), "")
    verbatim, _, lines = context.partition(LISTED_HEADER)
    return len(result.thread.messages), _offsite_weeks(verbatim), _offsite_weeks(lines)


def test_a_long_threads_view_names_what_the_whole_thread_names(make_history):
    """Past `view_limit` a request reads a view of a few dozen blocks, most of them about X: X is
    a named thing by the share of the thread's blocks that hold it, not of the view's, and the
    view takes enough blocks for X's words to name more stretches than a fact question reads."""
    rows = _weeks(40, 6)  # 40 stretches about the offsite among 240 others
    whole, view = _named(make_history, rows, "2500"), _named(make_history, rows, "2500", view_limit=100)
    assert whole[0] == len(rows) and view[0] < len(rows)  # the second read a view
    assert whole[2] and view[2]  # both list stretches left out
    assert len(view[1] | view[2]) >= len(whole[1] | whole[2]) - 1 >= 33  # more than 16 + 16 blocks


def test_words_that_much_of_a_long_thread_holds_name_no_thing_in_its_view_either(make_history):
    rows = _weeks(30, 3, every_week=" (see the Zanzibar offsite notes)")  # every stretch says it
    whole, view = _named(make_history, rows, "800"), _named(make_history, rows, "800", view_limit=60)
    assert view[0] < len(rows)
    assert not whole[2] and not view[2]
