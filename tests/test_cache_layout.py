"""The cache layout: a bot's prompts that keep a provider's prompt cache, and billed budgets.

A bot loop on a stored Teams-shaped thread: add the user's message, ask, add the reply. In the
cache layout each prompt starts with the previous one (system prompt, the recent turns, the
retrieved history earlier turns carried, each where it was) until the turns start again, the
new retrieval sits just before the request, and a billed budget holds what is new each turn.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from semhist import Budget, InputError
from semhist.billing import PRICE_MODELS, cached_tokens, prompt_tokens

from .test_work_counts import teams_thread

SYSTEM = "You are the team's assistant. Answer from the conversation."
TOPICS = ["the Frankfurt server migration", "ramen near the office", "the Q3 budget review",
          "the team offsite in Hakone", "customer churn numbers"]


def test_a_budget_can_be_given_in_billed_tokens():
    for text in ("1000b", "1000 billed", "1000B"):
        budget = Budget.parse(text)
        assert (budget.value, budget.billed, budget.relative, str(budget)) == (1000, True, False, "1000b")
    assert not Budget.parse("1000").billed
    # the layout follows the budget unless it is set: a billed budget is what the cache layout is for
    from semhist import Settings

    auto = Settings.load(env={})
    assert auto.layout == "auto" and auto.layout_for(Budget.parse("1000b")) == "cache"
    assert auto.layout_for(Budget.parse("2000")) == auto.layout_for(None) == "head"
    assert Settings.load(env={"SEMHIST_LAYOUT": "cache"}).layout_for(Budget.parse("10%")) == "cache"
    with pytest.raises(InputError, match="billed"):
        Budget.parse("10%b")


def test_price_models_bill_cached_tokens_as_providers_do():
    openai, anthropic = PRICE_MODELS["openai"], PRICE_MODELS["anthropic"]
    assert openai.billed(2000, 1000) == 2000  # under 1,024 tokens nothing is cached
    assert openai.billed(2000, 1500) == pytest.approx(1408 * 0.1 + 592)  # 1,024 + 3 x 128 cached
    assert anthropic.billed(1000, 600) == pytest.approx(600 * 0.1 + 400 * 1.25)  # the rest written
    a = [{"role": "system", "content": "rules"}, {"role": "user", "content": "hello there, how are you"}]
    b = [a[0], {"role": "user", "content": "hello there, what is new"}, {"role": "user", "content": "x"}]
    assert 0 < cached_tokens(a, b) < prompt_tokens(b)
    assert cached_tokens(a, a) == prompt_tokens(a) and cached_tokens(None, a) == 0


def _loop(history, turns: int, budget: Budget, every: timedelta = timedelta(minutes=2), thread: str = "t") -> list:
    t = datetime(2027, 1, 1, 9, tzinfo=timezone.utc)
    prompts = []
    for k in range(turns):
        t += every
        topic = TOPICS[k % len(TOPICS)]
        request = f"What did we decide about {topic}? (turn {k})"
        history.add_many(thread, [{"role": "user", "name": "Hanako Sato", "content": request, "id": f"u{k}",
                                  "timestamp": t.isoformat()}])
        result = history.ask(thread, request, strategy="blocks", budget=budget)
        prompts.append((result, history.log(thread, 1)[-1]["cache"]))
        history.add_many(thread, [{"role": "assistant", "name": "semhist", "id": f"a{k}", "content":
                                  f"On {topic}: it stays as agreed, see the notes (turn {k}).",
                                  "timestamp": (t + timedelta(seconds=20)).isoformat()}])
    return prompts


def _is_context(message: dict) -> bool:
    return "<retrieved_history>" in str(message.get("content"))


def test_the_cache_layout_keeps_each_prompt_start_and_holds_a_billed_budget(make_history):
    history = make_history(layout="cache", system_prompt=SYSTEM)
    history.add_many("t", teams_thread(400))
    budget = Budget.parse("1000b")
    prompts = _loop(history, 14, budget)
    continued = carried = 0
    shares = []
    for k, (result, cache) in enumerate(prompts):
        messages = list(result.prompt.messages)
        assert messages[0] == {"role": "system", "content": SYSTEM}
        assert messages[-1]["role"] == "user" and messages[-1]["content"] == result.request
        if k < len(TOPICS):  # a new topic: this turn's retrieval, just before the request
            assert _is_context(messages[-2])
        assert result.prompt.tokens <= 10_000  # 1,000 billed tokens at 0.1x: the prompt's hard limit
        carried += sum(_is_context(m) for m in messages[:-2]) > 0
        if k:
            before, before_cache = prompts[k - 1]
            shares.append(cached_tokens(before.prompt.messages, messages) / prompt_tokens(messages))
            if not cache["restarted"]:  # the turns did not start again
                continued += 1
                end = -2 if _is_context(before.prompt.messages[-2]) else -1
                kept = list(before.prompt.messages[:end])
                assert messages[:len(kept)] == kept  # the previous prompt is this one's start...
                if end == -2:  # ...and its retrieval is kept where it was
                    assert before.prompt.messages[-2] in messages[:-2]
    assert continued >= len(prompts) // 2 and carried >= 3
    assert sum(shares) / len(shares) >= 0.6, shares
    # the turn log says so: cached tokens per ask, and the bill they make (semhist stats)
    from semhist.stats import stats

    assert all(r.cached_tokens is not None for r, _ in prompts[1:])
    figures = stats(history.store, "t", "anthropic")["overall"]
    assert figures["cached_tokens"] > 0.5 * figures["tokens_sent"]
    assert figures["billed_input"] < 0.7 * figures["tokens_sent"] and figures["price_model"] == "anthropic"


def test_a_topic_that_comes_back_costs_no_new_retrieval_while_it_is_carried(make_history):
    """The best groups are the best groups: those an earlier turn brought and the prompt still
    carries count among the `top_n`, so a topic that holds adds no retrieval billed in full."""
    history = make_history(layout="cache", system_prompt=SYSTEM)
    history.add_many("t", teams_thread(400))
    prompts = _loop(history, 10, Budget.parse("1000b"))  # each of the five topics asked twice

    def fresh(k: int) -> int:  # the tokens retrieved for turn k alone, billed in full
        messages = prompts[k][0].prompt.messages
        return prompt_tokens([messages[-2]]) if _is_context(messages[-2]) else 0

    first = [fresh(k) for k in range(1, len(TOPICS))]  # the first ask filled its budget: no earlier prompt
    again = [fresh(k) for k in range(len(TOPICS) + 1, 2 * len(TOPICS)) if not prompts[k][1]["restarted"]]
    assert again and all(first), (first, again)
    assert sum(again) / len(again) < 0.5 * sum(first) / len(first), (first, again)
    assert min(again) == 0, again  # at least one topic's groups all still carried


def test_the_turns_start_again_when_what_they_carry_outgrows_the_budget(make_history):
    history = make_history(layout="cache", system_prompt=SYSTEM)
    history.add_many("t", teams_thread(400))
    prompts = _loop(history, 16, Budget.parse("300b"))  # turns may grow to 1,500 tokens
    restarts = [k for k, (_, cache) in enumerate(prompts) if cache["restarted"]]
    assert len(restarts) >= 2 and len(restarts) < len(prompts) // 2, restarts  # again, but not every turn
    for (result, cache), (before, before_cache) in zip(prompts[1:], prompts):
        if cache["restarted"]:  # a restart leaves what was carried behind
            assert sum(_is_context(m) for m in result.prompt.messages) <= 1


def test_without_a_turn_log_the_cache_layout_still_puts_retrieval_last(settings, ramen):
    from dataclasses import replace

    from semhist import Engine

    engine = Engine(replace(settings, layout="cache", system_prompt=SYSTEM), llm=None)
    # under the whole thread's 1,415 tokens: a thread that fits is sent whole, nothing retrieved
    result = engine.ask(ramen, "ラーメンの話題について要約してください。", budget=Budget.parse("1300"))
    engine.close()
    messages = result.prompt.messages
    assert messages[0]["content"] == SYSTEM and _is_context(messages[-2]) and result.prompt.tokens <= 1300
    assert not any(_is_context(m) for m in messages[1:-2])


def test_compare_shows_what_each_strategy_bills_at_a_warm_cache(settings, ramen):
    from dataclasses import replace

    from semhist import Engine
    from semhist.render import compare_rows

    request = "ラーメンの話題について要約してください。"
    for layout in ("head", "cache"):
        engine = Engine(replace(settings, layout=layout), llm=None)
        results = engine.compare(ramen, request, ["full", "token-budget"], budget=Budget.parse("1500"))
        rows = {r["strategy"]: r for r in compare_rows(results, "openai", layout)}
        engine.close()
        sliding = rows["token-budget"]
        if layout == "head":  # the window slides: nothing after the (absent) system prompt repeats
            assert sliding["billed_warm"] == sliding["input_tokens"]
        else:  # it only grows: all but the last exchange is read from the cache at 0.1x
            assert sliding["billed_warm"] < 0.3 * sliding["input_tokens"]


def test_an_unlogged_ask_in_the_cache_layout_says_it_carries_nothing_forward(make_history):
    """The layout carries the previous prompt through the turn log: asking with log_turn=False
    every turn is the head layout in disguise (prefix reuse ~.035), so it says so."""
    from semhist.history.request import UNLOGGED

    history = make_history()
    history.add_many("t", [{"role": "user" if i % 2 == 0 else "assistant", "content": f"note {i} on ramen"}
                           for i in range(6)])
    with pytest.warns(UserWarning, match="turn log"):
        unlogged = history.ask("t", "what about ramen?", budget=Budget.parse("1000b"), log_turn=False)
    assert UNLOGGED in unlogged.prompt.notes and not history.log("t")
    logged = history.ask("t", "what about ramen?", budget=Budget.parse("1000b"))
    head = history.ask("t", "what about ramen?", budget=Budget.parse("1000"), log_turn=False)
    assert UNLOGGED not in logged.prompt.notes and UNLOGGED not in head.prompt.notes  # head: nothing to carry



def test_a_thread_past_view_limit_keeps_its_prompt_start_as_a_whole_one_does(make_history):
    """Past `view_limit` a request reads a view; in the cache layout the view holds what the last
    prompt held (its turns from where they started, the retrieval it carried), and its turns
    are the thread's unbroken end, never blocks chosen for the request: else every prompt
    starts again and the provider's cache holds nothing of it."""
    restarts, reuse = {}, {}
    for view_limit in (100_000, 100):
        history = make_history(layout="cache", system_prompt=SYSTEM, view_limit=view_limit)
        history.add_many(f"t{view_limit}", teams_thread(400))
        # an hour apart: each turn closes a block, and the turns outgrow the view's newest messages
        prompts = _loop(history, 24, Budget.parse("2000b"), every=timedelta(hours=1), thread=f"t{view_limit}")
        assert (len(prompts[0][0].thread.messages) < 300) == (view_limit == 100)  # the second reads views
        restarts[view_limit] = sum(cache["restarted"] for _, cache in prompts[1:])
        shares = [cached_tokens(a.prompt.messages, b.prompt.messages) / prompt_tokens(b.prompt.messages)
                  for (a, _), (b, _) in zip(prompts, prompts[1:])]
        reuse[view_limit] = sum(shares) / len(shares)
        for result, _ in prompts:  # the turns sent are the thread's end, unbroken
            turns = [m for m in result.prompt.messages if m["role"] != "system" and not _is_context(m)]
            assert turns[-1]["content"] == result.request
    assert restarts[100] <= restarts[100_000] + 1, restarts
    assert reuse[100] >= 0.6 and reuse[100] >= reuse[100_000] - 0.05, reuse


def test_going_on_from_an_earlier_prompt_blocks_sends_a_thread_that_fits_whole_and_says_when_none_fit(
        make_history, ramen):
    """Issue 54, the cache layout after an earlier prompt (the turn log's): a thread that fits
    the budget is sent as `full` sends it (framed, it cost 103%), and it stays the prompt's start;
    a budget too tight for any retrieval says so."""
    from semhist.pipeline.assemble import NO_ROOM

    history = make_history(layout="cache")
    history.add_many("t", [{**m.to_openai(), "timestamp": m.timestamp.isoformat()} for m in ramen.messages])
    request = "ラーメンの話題は？"
    for budget in ("2000", "2000", "100%"):
        blocks = history.ask("t", request, strategy="blocks", budget=Budget.parse(budget))
        full = history.ask("t", request, strategy="full", budget=Budget.parse(budget))
        assert blocks.prompt.messages == full.prompt.messages and blocks.prompt.selection.whole_thread
    logged = [r for r in history.log("t") if r["strategy"] == "blocks"]
    assert not logged[-1]["cache"]["restarted"]  # the same start as the turn before
    for _ in range(2):  # the first ask, then one going on from it
        tight = history.ask("t", request, strategy="blocks", budget=Budget.parse("10%"))
        room = [n for n in tight.prompt.notes if n.startswith(NO_ROOM)]
        assert not tight.prompt.selection.retrieved and len(room) == 1, tight.prompt.notes
