"""A thread of many conversations: a request that names a person ranks the stretches where that
person speaks first (retrieval/pipeline/search.py, `author_boost`)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from semhist import Budget

PAIRS = [("Caroline", "Melanie"), ("Jon", "Gina"), ("Hanako Sato", "Taro Yamada"), ("Nate", "Joanna")]


def _thread() -> list[dict]:
    """Four pairs of people, each talking about their pottery class in turn, weeks apart."""
    t, rows = datetime(2026, 2, 2, 18, tzinfo=timezone.utc), []
    for week in range(3):
        for k, (a, b) in enumerate(PAIRS):
            at = t + timedelta(days=7 * week + k)
            rows += [{"role": "user", "name": a, "content": f"I went to my pottery class again, week {week}.",
                      "timestamp": at.isoformat()},
                     {"role": "assistant", "name": b, "content": f"Nice! What did you make in pottery this time, {a}?",
                      "timestamp": (at + timedelta(minutes=1)).isoformat()},
                     {"role": "user", "name": a, "content": f"A bowl with a blue glaze ({a.split()[0]}'s week {week}).",
                      "timestamp": (at + timedelta(minutes=2)).isoformat()}]
    return rows


def _first_speaker(result) -> str:
    context = next(m["content"] for m in result.prompt.messages if "<retrieved_history>" in str(m["content"]))
    first = next(line for line in context.splitlines()[2:] if not line.startswith("["))
    return first.split(":", 1)[0]


def test_a_named_person_s_stretches_rank_first(make_history):
    on, off = make_history(), make_history(author_boost=False)
    for h in (on, off):
        h.add_many("t", _thread())
    request = "What did Jon make in his pottery class?"
    boosted = on.ask("t", request, budget=Budget.parse("400"), log_turn=False)
    speakers = {line.split(":", 1)[0] for m in boosted.prompt.messages if "<retrieved_history>" in str(m["content"])
                for line in m["content"].splitlines()[2:] if ":" in line and not line.startswith("[")}
    assert speakers <= {"Jon", "Gina"}, speakers  # only Jon's conversation fits, and it is Jon's
    plain = off.ask("t", request, budget=Budget.parse("400"), log_turn=False)
    assert {line.split(":", 1)[0] for m in plain.prompt.messages if "<retrieved_history>" in str(m["content"])
            for line in m["content"].splitlines()[2:] if ":" in line and not line.startswith("[")} - {"Jon", "Gina"}


def test_a_conversation_between_two_people_is_not_reranked(make_history):
    """Every stretch has both speakers: naming one of them says nothing about where to look."""
    from semhist.pipeline.search import author_boost

    h = make_history()
    h.add_many("t", [r for r in _thread() if r["name"] in PAIRS[0]])
    index = h.index("t")
    assert author_boost(index, ["carolin", "potteri"]) is None
