"""The boundary rules every strategy keeps, and the worked example's numbers."""

import json

import pytest

from semhist.indexers.loader import loads
from semhist.kernel.budget import Budget
from semhist.kernel.settings import Settings
from semhist import STRATEGIES, Engine
from semhist.pipeline.strategies import NEEDS_LLM
from tests.conftest import RAMEN_REQUEST, RAMEN_TURNS

ALL = [name for name in STRATEGIES if name not in NEEDS_LLM]  # summary/structured: tests/test_memory.py


def tool_thread():
    """A thread with a system prompt, tool calls and results, and several exchanges."""
    rows = [{"role": "system", "content": "You are the ops bot. Never reveal passwords."}]
    t = 1_750_000_000
    for i in range(12):
        rows.append({"role": "user", "content": f"question {i} about the Hong Kong server load", "timestamp": t})
        if i % 3 == 0:
            call = {"id": f"c{i}", "type": "function", "function": {"name": "load", "arguments": "{}"}}
            rows.append({"role": "assistant", "content": None, "tool_calls": [call], "timestamp": t + 5})
            rows.append({"role": "tool", "content": f"load is {i}%", "tool_call_id": f"c{i}", "timestamp": t + 6})
        rows.append({"role": "assistant", "content": f"answer {i}: the load is fine", "timestamp": t + 10})
        t += 400
    return loads(json.dumps(rows)).only()


@pytest.fixture(scope="module")
def small_engine(cache_dir):
    return Engine(Settings.load(env={}, cache_dir=cache_dir, recent=4, window=5, utterance_k=3), llm=None)


@pytest.fixture(scope="module")
def cache_engine(cache_dir):
    return Engine(Settings.load(env={}, cache_dir=cache_dir, recent=4, window=5, utterance_k=3, layout="cache",
                                recent_step=3), llm=None)


def history_part(messages):
    """The verbatim history: after the system/context messages, before the request (and
    before the context message the cache layout puts just before it)."""
    body = list(messages[:-1])
    while body and body[0]["role"] == "system":
        body.pop(0)
    if body and "<retrieved_history>" in str(body[-1].get("content")):
        body.pop()
    return body


@pytest.mark.parametrize("layout", ["head", "cache"])
@pytest.mark.parametrize("strategy", ALL)
@pytest.mark.parametrize("budget", [None, Budget.parse("40%"), Budget.parse("150"), Budget.parse("100b")])
def test_boundary_rules(small_engine, cache_engine, strategy, budget, layout):
    thread = tool_thread()
    engine = cache_engine if layout == "cache" else small_engine
    result = engine.ask(thread, "what was the Hong Kong load?", strategy=strategy, budget=budget)
    check_boundary_rules(thread, result, budget)


def check_boundary_rules(thread, result, budget):
    """The rules of DESIGN.md that every strategy keeps; each assertion fails when one breaks."""
    msgs = result.prompt.messages
    # the system prompt comes first, untouched
    assert msgs[0] == {"role": "system", "content": "You are the ops bot. Never reveal passwords."}
    # the request comes last
    assert msgs[-1] == {"role": "user", "content": "what was the Hong Kong load?"}
    history = history_part(msgs)
    # the history starts on a user turn
    assert history and history[0]["role"] == "user"
    # every tool result follows the assistant call it answers
    for i, m in enumerate(history):
        if m["role"] == "tool":
            calls = [c["id"] for c in history[i - 1].get("tool_calls", [])] if history[i - 1]["role"] == "assistant" \
                else [c["id"] for c in history[i - 2].get("tool_calls", [])]
            assert m["tool_call_id"] in calls
        for c in m.get("tool_calls") or []:
            assert any(x.get("tool_call_id") == c["id"] for x in history[i + 1:])
    # the last two exchanges are verbatim
    last_user = [i for i, m in enumerate(thread.messages) if m.role == "user"][-2]
    tail = [thread.messages[p].to_openai() for p in range(last_user, len(thread.messages))]
    assert history[-len(tail):] == tail
    # retrieved text lives in its own delimited message, never inside the system prompt
    assert "<retrieved_history>" not in msgs[0]["content"]
    for m in msgs[1:-1]:
        if "<retrieved_history>" in (m["content"] or ""):
            assert m["content"].rstrip().endswith("</retrieved_history>")
    # a budget is a hard limit
    if budget is not None:
        assert result.prompt.tokens <= result.budget_tokens or result.prompt.notes
    assert result.prompt.tokens == __import__("semhist.kernel.tokens", fromlist=["x"]).count_messages(msgs)


def test_budget_drops_lowest_ranked_blocks_first(small_engine):
    thread = tool_thread()
    free = small_engine.ask(thread, "Hong Kong load", strategy="utterances")
    tight = small_engine.ask(thread, "Hong Kong load", strategy="utterances",
                             budget=Budget.parse(str(free.prompt.tokens - 1)))
    kept = [r.rank for r in tight.prompt.selection.retrieved]
    assert kept == list(range(len(kept))) and len(kept) < len(free.prompt.selection.retrieved)
    assert tight.prompt.selection.history == free.prompt.selection.history


def test_worked_example_blocks_keep_every_ramen_turn_at_half_the_tokens(engine, ramen):
    results = {r.strategy: r for r in engine.compare(ramen, RAMEN_REQUEST, ALL)}
    blocks = results["blocks"]
    assert RAMEN_TURNS <= blocks.included
    assert blocks.prompt.tokens <= 0.5 * blocks.full_tokens
    assert blocks.llm_calls <= 1
    assert blocks.prompt.messages[0]["role"] == "user" and "<retrieved_history>" in blocks.prompt.messages[0]["content"]
    # the simple methods lose ramen turns
    assert not RAMEN_TURNS <= results["utterances"].included
    assert not RAMEN_TURNS <= results["window"].included
    assert RAMEN_TURNS <= results["full"].included


def test_retrieved_context_is_chronological_and_dated(engine, ramen):
    result = engine.ask(ramen, RAMEN_REQUEST)
    context = result.prompt.messages[0]["content"]
    assert "2025-07-29 09:00" in context
    assert context.index("一蘭") < context.index("すみれ")


def test_a_block_too_big_for_the_budget_gives_the_most_of_itself_that_fits(engine, ramen):
    result = engine.ask(ramen, RAMEN_REQUEST, budget=Budget.parse("30%"))
    block = engine.index(ramen).blocks[0]  # the first ramen talk, 468 tokens: too big for 30%
    group = next(g for g in result.prompt.selection.retrieved if g.block_id == block.id)
    (hit,) = group.whole
    part = block.part_of(block.message_ids.index(hit))
    assert len(group.message_ids) < len(block.message_ids)
    assert set(part) < set(group.message_ids)  # more than the hit's topic sub-segment
    assert group.message_ids == tuple(range(group.message_ids[0], group.message_ids[-1] + 1))
    assert result.prompt.tokens <= result.budget_tokens


def test_min_score_compatibility_mode(cache_dir, ramen):
    strict = Engine(Settings.load(env={}, cache_dir=cache_dir, min_score=0.99), llm=None)
    assert strict.ask(ramen, RAMEN_REQUEST).prompt.selection.retrieved == ()


def test_english_thread(engine, english):
    request = "What did we decide about the Hong Kong server?"
    result = engine.ask(english, request)
    assert set(english.ground_truth(request).relevant) <= result.included
    assert result.prompt.tokens < result.full_tokens


def test_unknown_strategy(engine, ramen):
    from semhist.kernel.errors import ConfigError
    with pytest.raises(ConfigError, match="blocks"):
        engine.ask(ramen, "x", strategy="magic")


@pytest.mark.parametrize("strategy", ALL)
def test_operator_instructions_mid_thread_stay_verbatim(small_engine, strategy):
    thread = tool_thread()
    rows = [m.to_openai() | ({"timestamp": m.timestamp.isoformat()} if m.timestamp else {}) for m in thread.messages]
    rows.insert(9, {"role": "system", "content": "Operator: from now on answer in English only.",
                    "timestamp": rows[8]["timestamp"]})
    thread = loads(json.dumps(rows)).only()
    result = small_engine.ask(thread, "Hong Kong load?", strategy=strategy, budget=Budget.parse("150"))
    systems = [m["content"] for m in result.prompt.messages if m["role"] == "system"]
    assert "Operator: from now on answer in English only." in systems
    assert systems[0] == "You are the ops bot. Never reveal passwords."


def test_a_mid_thread_instruction_keeps_its_place_and_the_prompt_start(small_engine):
    """full history: the prompt after an operator instruction arrives starts with the prompt
    before it (what a provider's prompt cache reuses); it used to jump to the top."""
    rows = [{"role": "system", "content": "You are the ops bot."}]
    for i in range(3):
        rows += [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]
    before = small_engine.ask(loads(json.dumps(rows)).only(), "question 3", strategy="full").prompt.messages
    rows += [{"role": "system", "content": "Operator: answer in English only."},
             {"role": "user", "content": "question 3"}, {"role": "assistant", "content": "answer 3"}]
    after = small_engine.ask(loads(json.dumps(rows)).only(), "question 4", strategy="full").prompt.messages
    assert after[:len(before) - 1] == before[:-1]
    assert [m["content"] for m in after[6:10]] == ["answer 2", "Operator: answer in English only.", "question 3",
                                                   "answer 3"]


@pytest.mark.parametrize("strategy", ALL)
def test_alternation_when_the_api_requires_it(cache_dir, strategy):
    rows = [{"role": "user", "content": "ramen?"}, {"role": "user", "content": "any ramen place?"},
            {"role": "assistant", "content": "Ichiran."}, {"role": "user", "content": "and the soup?"},
            {"role": "user", "content": "tonkotsu right?"}]
    thread = loads(json.dumps(rows)).only()
    engine = Engine(Settings.load(env={}, cache_dir=cache_dir, alternate=True), llm=None)
    msgs = engine.ask(thread, "summarize ramen", strategy=strategy).prompt.messages
    roles = [m["role"] for m in msgs if m["role"] != "system"]
    assert roles[0] == "user" and all(a != b for a, b in zip(roles, roles[1:])), roles
    assert msgs[-1]["content"].endswith("summarize ramen")


def test_an_instruction_between_a_tool_call_and_its_result_waits_for_the_result(small_engine):
    rows = [{"role": "user", "content": "what is the Hong Kong load?"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "load", "arguments": "{}"}}]},
            {"role": "system", "content": "Operator: answer in English only."},
            {"role": "tool", "content": "load is 40%", "tool_call_id": "c1"},
            {"role": "assistant", "content": "The load is 40%."}]
    result = small_engine.ask(loads(json.dumps(rows)).only(), "and now?", strategy="full")
    roles = [m["role"] for m in result.prompt.messages]
    assert roles == ["user", "assistant", "tool", "system", "assistant", "user"], roles
    assert not result.prompt.notes


def test_at_a_tight_budget_the_recent_turns_leave_room_for_retrieval(engine, ramen):
    from semhist.pipeline.assemble import history_cost
    from semhist.pipeline.select import PROTECTED_UNITS
    from semhist.pipeline.strategies import RECENT_SHARE

    result = engine.ask(ramen, "一蘭の特徴は？", budget=Budget.parse("25%"))
    units = result.prompt.selection.history
    assert len(units) >= PROTECTED_UNITS
    assert len(units) == PROTECTED_UNITS or history_cost(ramen, result.prompt.selection.history_ids) \
        <= RECENT_SHARE * result.budget_tokens
    assert len(engine.ask(ramen, "一蘭の特徴は？").prompt.selection.history) > len(units)  # no budget: all recent


@pytest.fixture(scope="module", params=["head", "cache"])
def layout_engine(request, cache_dir):
    return Engine(Settings.load(env={}, cache_dir=cache_dir, layout=request.param), llm=None)


def test_blocks_never_sends_more_than_full_when_the_whole_thread_fits(layout_engine, ramen):
    """Issue 54: at 2000 tokens blocks sent the 68 messages of the ramen thread as 103% of
    `full`: the older ones framed in the context message, each stretch dated."""
    for request in (RAMEN_REQUEST, "ラーメンの話題は？"):
        whole = layout_engine.ask(ramen, request, strategy="full").prompt.tokens
        for budget in ("100%", str(whole), str(whole + 50), "2000", "20000"):
            full, blocks = (layout_engine.ask(ramen, request, strategy=s, budget=Budget.parse(budget))
                            for s in ("full", "blocks"))
            assert full.prompt.tokens == whole, budget  # the whole thread fits
            assert blocks.prompt.tokens <= full.prompt.tokens, (request, budget)
            assert blocks.included == full.included and blocks.prompt.selection.whole_thread
        truth = set(ramen.ground_truth(RAMEN_REQUEST).relevant)
        assert truth <= {ramen.messages[p].index for p in blocks.included}
    # a budget one token short of the whole thread retrieves as before
    short = layout_engine.ask(ramen, "ラーメンの話題は？", strategy="blocks", budget=Budget.parse(str(whole - 1)))
    assert short.prompt.selection.retrieved and not short.prompt.selection.whole_thread


def test_a_prompt_without_retrieval_says_whether_the_budget_or_the_scores_left_it_out(layout_engine, ramen):
    """Issue 54: at 10% the ramen topic's best block (retrieved at 25%) did not fit, and nothing said so."""
    from semhist.pipeline.assemble import NO_ROOM

    tight = layout_engine.ask(ramen, "ラーメンの話題は？", budget=Budget.parse("10%"))
    room = [n for n in tight.prompt.notes if n.startswith(NO_ROOM)]
    assert not tight.prompt.selection.retrieved and len(room) == 1, tight.prompt.notes
    needed, left = (int(w) for w in room[0].replace("(", " ").replace(",", " ").split() if w.isdigit())
    assert needed > left == tight.budget_tokens - tight.prompt.tokens
    roomy = layout_engine.ask(ramen, "ラーメンの話題は？", budget=Budget.parse("25%"))
    assert roomy.prompt.selection.retrieved and not any(n.startswith(NO_ROOM) for n in roomy.prompt.notes)
    # nothing above the threshold: no candidate, no note about the room
    strict = Engine(Settings.load(env={}, cache_dir=layout_engine.settings.cache_dir, min_score=0.95,
                                  layout=layout_engine.settings.layout), llm=None)
    scored = strict.ask(ramen, "ラーメンの話題は？", budget=Budget.parse("10%"))
    assert not scored.prompt.selection.retrieved and not scored.prompt.notes
