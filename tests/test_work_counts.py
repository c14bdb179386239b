"""An ask right after an append costs what any ask costs, whatever the thread's length.

Proven by counting, not timing (tests/workcount.py): on Teams-shaped threads of 1,000 and
8,000 messages (a speaker's name on every message, message ids as keys, tool calls and their
results, bursts and long pauses) the ask right after an append makes the same number of
tokenizer calls, store reads and rows read as on the shorter thread, and executes the same
Python lines (within a small constant) beyond an ask with no write before it.

Before the author terms and the tool-cleared view were kept by appends, the ask after an
append tokenized the name of every message of the thread (1,000 or 8,000 calls) and walked
every message again for the tool results: these tests failed there.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest

from semhist.kernel.budget import Budget
from semhist.kernel.tokens import _count_cached

from .workcount import count_work

pytestmark = pytest.mark.slow

T0 = datetime(2026, 1, 5, 9, tzinfo=timezone.utc)
SIZES = (1_000, 8_000)
PEOPLE = ["Taro Yamada", "Hanako Sato", "Mary Ann Lee", "Wang Xiaoming", "Priya Raman"]
TOPICS = ["the Frankfurt server migration", "ramen near the office", "the Q3 budget review",
          "the flaky login test", "the team offsite in Hakone", "the release freeze", "customer churn numbers"]
TAIL = [  # the same last turns on every thread, after a long pause: the open block is the same
    ("user", "Hanako Sato", "Can you check whether the Frankfurt server was patched?"),
    ("assistant", "semhist", None),  # a tool call
    ("tool", None, "patch level: 2026-01-03, kernel 6.12.4, all services restarted " * 6),
    ("assistant", "semhist", "It was patched on 3 January; every service was restarted."),
]
REQUEST = "What did Hanako say about the Frankfurt server?"


def teams_thread(n: int, seed: int = 7) -> list[dict]:
    """n messages as a Teams bot stores them: activity ids, speakers, bursts, tool calls, pauses."""
    rng, out, t, call = random.Random(seed), [], T0, 0

    def put(role, name, content, pause, **extra):
        nonlocal t
        t += timedelta(seconds=pause)
        out.append({"role": role, "content": content, "name": name, "id": f"1:{len(out):07d}",
                    "timestamp": t.isoformat(), **extra})

    while len(out) < n - len(TAIL) - 4:
        person, topic = rng.choice(PEOPLE), rng.choice(TOPICS)
        put("user", person, f"About {topic}: what is the status, note {len(out)}?",
            rng.choice([30, 45, 90, 4 * 3600]))
        if rng.random() < 0.3:  # a second burst a second later
            put("user", person, f"also {rng.choice(['any news', 'who owns it', 'deadline?'])}", 1)
        if rng.random() < 0.25:  # the bot reads a tool first
            call += 1
            put("assistant", "semhist", None, 2, tool_calls=[{
                "id": f"call_{call}", "type": "function",
                "function": {"name": "search_tickets", "arguments": f'{{"q": "{topic}"}}'}}])
            put("tool", None, f"{topic}: ticket {call} open, owner {person}. " * 8, 1, tool_call_id=f"call_{call}")
        put("assistant", "semhist", f"On {topic}: {rng.choice(['on track', 'blocked', 'done'])} (item {len(out)}).", 5)
    for k, (role, name, content) in enumerate(TAIL):
        extra = {"tool_calls": [{"id": "call_tail", "type": "function", "function": {
            "name": "server_status", "arguments": '{"host": "fra-1"}'}}]} if content is None and role == "assistant" \
            else {"tool_call_id": "call_tail"} if role == "tool" else {}
        put(role, name, content, 6 * 3600 if k == 0 else 3, **extra)
    return out


def _append_and_ask(h, thread_id: str, budget: Budget):
    h.ask(thread_id, REQUEST, budget=budget)  # state loaded, query embedded
    if h.parts.states.peek(thread_id).loading is not None:  # a long thread's first ask: read whole meanwhile
        h.parts.executor.submit(lambda: None).result()
        h.ask(thread_id, REQUEST, budget=budget)
    if h.parts.states.peek(thread_id).vectors is not None:  # a long thread's FAISS index is built in the background
        assert h.vectors(thread_id).wait(300)
        h.ask(thread_id, REQUEST, budget=budget)
    h.add_many(thread_id, [{"role": "user", "name": "Hanako Sato", "id": "1:new",
                            "content": "And the Tokyo one?", "timestamp": (T0 + timedelta(days=400)).isoformat()}])
    _count_cached.cache_clear()
    after, work_after = count_work(lambda: h.ask(thread_id, REQUEST, budget=budget))
    _count_cached.cache_clear()
    _, work_still = count_work(lambda: h.ask(thread_id, REQUEST, budget=budget))
    return after, work_after, work_still


@pytest.mark.parametrize("layout,budget", [("head", "2000"), ("cache", "1000b")])
@pytest.mark.parametrize("view_limit", [20_000, 500], ids=["whole index", "candidate views"])
def test_an_ask_after_an_append_does_not_grow_with_the_thread(make_history, view_limit, layout, budget):
    """The cache layout reads the turn log too (a bounded number of the newest records)."""
    budget = Budget.parse(budget)
    counts = {}
    for n in SIZES:
        writer = make_history()
        writer.add_many(f"t{n}", teams_thread(n))
        h = make_history(view_limit=view_limit, layout=layout)
        result, after, still = _append_and_ask(h, f"t{n}", budget)
        assert any(m.get("content") == "And the Tokyo one?" for m in result.prompt.messages)  # the append is seen
        if view_limit > n:  # old tool results show as placeholders: the cleared view is in use
            assert sum(m.cleared is not None for m in result.thread.messages) > 10
        counts[n] = (after, still)
    # what an ask after a write adds to an ask without one: a few rows of the block the write
    # closed (its pause ends the open one), never more on the longer thread
    for kind, most in (("tokenize", 0), ("token_counts", 2), ("store_reads", 1), ("store_rows", 10), ("lines", 600)):
        extra = {n: after[kind] - still[kind] for n, (after, still) in counts.items()}
        assert max(extra.values()) <= most, (kind, extra)
        assert extra[SIZES[1]] <= extra[SIZES[0]] + max(2, most // 6), (kind, extra)
    reads = {n: after["store_reads"] + after["store_rows"] for n, (after, _) in counts.items()}
    assert reads[SIZES[1]] <= reads[SIZES[0]] + 4, reads  # store work per ask: not the thread's size


def test_a_thread_id_is_checked_where_it_comes_in_and_where_a_thread_row_is_written(make_history):
    """An append and an ask each check the thread id twice: History where it comes in, and the
    store where a thread row can be made (the ask writes its turn log). The store's reads take
    the id as given; before, an ask checked it 3 times and an append 5."""
    import sys

    from semhist.kernel import ids

    history = make_history()
    history.add_many("t", teams_thread(40))
    history.ask("t", "warm up")
    checks = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is ids.check_thread_id.__code__:
            checks.append(frame.f_back.f_code.co_name)

    for call in (lambda: history.add("t", "user", "and the budget?"), lambda: history.ask("t", "the budget?")):
        checks.clear()
        sys.setprofile(profile)
        try:
            call()
        finally:
            sys.setprofile(None)
        assert len(checks) == 2 and "_ensure_thread" in checks, checks
