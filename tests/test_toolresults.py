"""Old tool results leave the prompt's turns as placeholders; they stay searchable."""

import json

import pytest

from semhist.indexers.loader import loads
from semhist.kernel.settings import Settings
from semhist import Engine
from semhist.pipeline.toolresults import clearable

CITIES = ["Hong Kong", "Frankfurt", "Dublin", "Tokyo", "Sydney", "Toronto", "Paris", "Madrid", "Oslo", "Lima", "Cairo"]


def agent_thread(results: int = 11, spacing: int = 400):
    """An agent's thread: each turn reads a server's report (a long tool result) and answers."""
    rows = [{"role": "system", "content": "You are the ops bot. Never reveal passwords."}]
    t = 1_750_000_000
    for i in range(results):
        city = CITIES[i % len(CITIES)]
        tool = "read_runbook" if i == 0 else "server_report"
        rows.append({"role": "user", "content": f"How is the {city} server?", "timestamp": t})
        rows.append({"role": "assistant", "content": None, "timestamp": t + 5, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": tool, "arguments": json.dumps({"city": city})}}]})
        report = f"{city} server report: disk {40 + i}% full, kernel 6.{i}, uptime {i + 3} days. " * 20
        rows.append({"role": "tool", "content": report, "tool_call_id": f"c{i}", "timestamp": t + 6})
        rows.append({"role": "assistant", "content": f"The {city} server is fine.", "timestamp": t + 10})
        t += spacing
    return loads(json.dumps(rows)).only()


def engine_with(cache_dir, **overrides):
    return Engine(Settings.load(env={}, cache_dir=cache_dir, **overrides), llm=None)


def tool_contents(result):
    return [m["content"] for m in result.prompt.messages if m["role"] == "tool"]


def test_old_results_become_placeholders_and_the_last_stay_whole(cache_dir):
    thread = agent_thread(11)  # keep 3, clear 5 at a time: 8 old results, 5 cleared
    engine = engine_with(cache_dir, keep_tool_results=3, tool_clear_step=5)
    result = engine.ask(thread, "How is the Cairo server?", strategy="full")
    shown = tool_contents(result)
    assert len(shown) == 11
    assert shown[0].startswith('[result of read_runbook({"city": "Hong Kong"}) cleared')
    assert all(s.startswith("[result of server_report(") for s in shown[1:5])
    assert all("server report: disk" in s for s in shown[5:])
    msgs = result.prompt.messages
    for i, m in enumerate(msgs):  # each call still answered, right after it
        if m["role"] == "tool":
            assert msgs[i - 1]["tool_calls"][0]["id"] == m["tool_call_id"]
    whole = engine_with(cache_dir, keep_tool_results=-1).ask(thread, "How is the Cairo server?", strategy="full")
    assert result.prompt.tokens < 0.7 * whole.prompt.tokens


def test_results_are_cleared_in_steps_so_the_prompt_start_holds(cache_dir):
    engine = engine_with(cache_dir, keep_tool_results=3, tool_clear_step=5)
    counts = [len(clearable(agent_thread(n), engine.settings)) for n in range(1, 16)]
    assert counts == [0] * 7 + [5] * 5 + [10] * 3  # never one more each turn


def test_a_protected_tool_is_never_cleared(cache_dir):
    engine = engine_with(cache_dir, keep_tool_results=0, tool_clear_step=1, protected_tools="read_runbook")
    shown = tool_contents(engine.ask(agent_thread(6), "How is the Paris server?", strategy="full"))
    assert "server report" in shown[0] and all(s.startswith("[result of server_report") for s in shown[1:-1])
    assert "server report" in shown[-1]  # the latest turn's result stays whole whatever the setting


def test_a_cleared_result_is_still_found_and_shown_whole(cache_dir):
    engine = engine_with(cache_dir, keep_tool_results=3, tool_clear_step=5)
    result = engine.ask(agent_thread(11), "Which kernel did the Dublin server run?")
    context = next(m["content"] for m in result.prompt.messages if "<retrieved_history>" in str(m["content"]))
    assert "Dublin server report: disk 42% full, kernel 6.2" in context


def test_a_block_retrieved_for_its_talk_brings_its_other_results_as_placeholders(cache_dir):
    engine = engine_with(cache_dir, keep_tool_results=3, tool_clear_step=5)
    result = engine.ask(agent_thread(11, spacing=60), "What did we say about the Dublin server?")
    context = next(m["content"] for m in result.prompt.messages if "<retrieved_history>" in str(m["content"]))
    lines = context.splitlines()
    whole = [line for line in lines if line.startswith("tool: ") and "server report" in line]
    assert len(whole) <= len(result.prompt.selection.retrieved)  # only each group's hit
    assert any(line.startswith("tool: [result of") for line in lines)


@pytest.mark.parametrize("value", [-2])
def test_keep_tool_results_is_checked(cache_dir, value):
    from semhist.kernel.errors import ConfigError

    with pytest.raises(ConfigError, match="keep_tool_results"):
        Settings.load(env={}, keep_tool_results=value)


def test_the_current_turns_results_are_never_cleared(cache_dir):
    # an agent in a tool loop: eight results read for the answer it is writing now
    thread = agent_thread(4)
    rows = [m.to_openai() for m in thread.messages] + [{"role": "user", "content": "Compare every server."}]
    for i in range(8):
        rows.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"now{i}", "type": "function", "function": {"name": "server_report", "arguments": "{}"}}]})
        rows.append({"role": "tool", "content": f"report {i}: " + "disk fine. " * 50, "tool_call_id": f"now{i}"})
    engine = engine_with(cache_dir, keep_tool_results=3, tool_clear_step=5)
    current = loads(json.dumps(rows)).only()
    shown = tool_contents(engine.ask(current, "Compare every server.", strategy="full"))
    assert all(s.startswith("report ") for s in shown[-8:])
    assert all(s.startswith("[result of ") for s in shown[:4])  # the earlier turns' results


def test_a_long_threads_view_never_clears_the_current_turns_results(make_history):
    """An agent's tool loop longer than the view's newest messages: its results before the
    view's unbroken end are still the current turn's, and stay whole (a view once cleared them)."""
    rows = [{"role": "user" if k % 2 == 0 else "assistant", "content": f"Earlier talk about the printer, part {k}.",
             "timestamp": f"2026-03-01T09:{k // 60:02d}:{k % 60:02d}+00:00"} for k in range(160)]
    rows.append({"role": "user", "content": "Look up every ticket of the Zanzibar offsite.",
                 "timestamp": "2026-03-02T09:00:00+00:00"})
    for k in range(30):
        rows.append({"role": "assistant", "content": "", "timestamp": f"2026-03-02T09:01:{k:02d}+00:00",
                     "tool_calls": [{"id": f"c{k}", "type": "function",
                                     "function": {"name": "lookup", "arguments": json.dumps({"n": k})}}]})
        rows.append({"role": "tool", "tool_call_id": f"c{k}", "timestamp": f"2026-03-02T09:01:{k:02d}+00:00",
                     "content": f"Zanzibar offsite ticket {k}: deposit paid, ferry booked. " * 3})
    for view_limit in (10_000, 100):
        h = make_history(view_limit=view_limit)
        h.add_many(f"t{view_limit}", rows)
        result = h.ask(f"t{view_limit}", "Look up every ticket of the Zanzibar offsite.", budget=None)
        shown = [m for m in result.prompt.messages if m["role"] == "tool"]
        assert shown and not any("cleared:" in str(m["content"]) for m in shown), view_limit
