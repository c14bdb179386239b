"""A budget never starves the conversation, and `full` past `view_limit` sends every message or
refuses. Real components: the USE-m3 embedder, FAISS, SQLite, the frameworks' own test models."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from semhist.kernel.errors import TooLongError
from semhist.kernel.budget import Budget
from semhist.kernel.settings import Settings
from semhist.kernel.tokens import count_messages, count_text

from .conftest import RAMEN_REQUEST, SAMPLES

YOUNG = [("user", "Our servers are in Frankfurt."), ("assistant", "Noted: the servers are in Frankfurt."),
         ("user", "How do I read the logs?"), ("assistant", "Use journalctl on the host.")]
QUESTION = "Where are our servers?"


@pytest.fixture
def make_history(tmp_path, cache_dir):
    from semhist import History

    made = []

    def make(**overrides):
        settings = Settings.load(env={}, cache_dir=cache_dir, data_dir=tmp_path / "data",
                                 db=f"sqlite:///{tmp_path / 'db.sqlite3'}", **overrides)
        made.append(History(settings, llm=None))
        return made[-1]

    yield make
    for h in made:
        h.close()


def young(history, thread_id: str = "young") -> None:
    history.add_many(thread_id, [{"role": r, "content": c} for r, c in YOUNG])


def text(messages) -> str:
    return "\n".join(str(m["content"] if isinstance(m, dict) else m.content) for m in messages)


def test_a_share_never_goes_below_what_the_last_exchanges_need():
    assert Budget.parse("25%").tokens(100, floor=60) == 60
    assert Budget.parse("25%").tokens(1000, floor=60) == 250
    assert Budget.parse("25%").tokens(100, floor=500) == 100  # never above the whole history
    assert Budget.parse("300").tokens(100, floor=600) == 300  # tokens are the caller's hard cap


# -- the young thread ------------------------------------------------------------------------
@pytest.mark.parametrize("share", ["25%", "50%"])
def test_a_share_of_a_young_thread_keeps_what_was_just_said(make_history, share):
    from semhist.integrations import langchain as lc

    h = make_history()
    young(h)
    got = lc.semhist_prompt(h, "young", QUESTION, budget=share)
    assert "Frankfurt" in text(got) and got[-1].content == QUESTION
    result = h.ask("young", QUESTION, budget=Budget.parse(share))
    assert result.budget_tokens > Budget.parse(share).tokens(result.full_tokens)  # raised to the floor...
    assert any("raised" in n for n in result.prompt.notes) and not result.prompt.dropped_recent  # ...and said
    assert result.prompt.tokens == count_messages(list(result.prompt.messages)) <= result.budget_tokens


def test_a_bot_that_stores_the_request_first_keeps_two_exchanges_before_it(make_history):
    h = make_history()
    young(h, "bot")
    h.add("bot", "user", QUESTION)  # the bot's path: store the message, then build the prompt
    result = h.ask("bot", QUESTION, budget=Budget.parse("25%"))
    sent = list(result.prompt.messages)
    assert "Frankfurt" in text(sent) and "journalctl" in text(sent)
    assert [m["content"] for m in sent].count(QUESTION) == 1 and sent[-1]["content"] == QUESTION
    assert result.prompt.tokens == count_messages(sent)  # the stored request is counted once


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the workflow inspects its pydantic agent
def test_a_llamaindex_agent_at_a_share_remembers_the_turn_before(make_history):
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.llms.mock import MockFunctionCallingLLMWithChatMemoryOfLastCall

    from semhist.integrations import llamaindex as li

    h = make_history()
    llm = MockFunctionCallingLLMWithChatMemoryOfLastCall()  # answers with the last message it was sent
    agent = FunctionAgent(tools=[], llm=llm)
    memory = li.SemhistMemory.from_defaults(h, "li-young", budget="25%")

    async def run(said: str):
        return await agent.run(user_msg=said, memory=memory)

    asyncio.run(run("Our servers are in Frankfurt."))
    asyncio.run(run(QUESTION))
    assert [m.content for m in llm.last_chat_messages][-1] == QUESTION
    assert "Frankfurt" in "\n".join(m.content or "" for m in llm.last_chat_messages)


# -- a tool loop at a tight budget -----------------------------------------------------------
def disk_call(n: int) -> dict:
    return {"id": f"c{n}", "type": "function", "function": {"name": "disk_usage", "arguments": '{"host": "all"}'}}


def test_a_tool_loop_at_a_tight_budget_keeps_the_answer_and_clears_what_it_read(make_history):
    h = make_history()
    listing = " ".join(f"host-{i} {i * 7 % 100}%" for i in range(68))
    assert 380 <= count_text(listing) <= 450  # a result bigger than the budget
    h.add_many("loop", [
        {"role": "user", "content": "How full are the disks?"},
        {"role": "assistant", "content": None, "tool_calls": [disk_call(1)]},
        {"role": "tool", "content": listing, "tool_call_id": "c1"},
        {"role": "assistant", "content": "host-13 is at 91%."},
        # the current turn, stored: the agent called a tool and is writing its answer
        {"role": "user", "content": "Which host was nearly full?"},
        {"role": "assistant", "content": None, "tool_calls": [disk_call(2)]},
        {"role": "tool", "content": "host-13 91%", "tool_call_id": "c2"}])
    result = h.ask("loop", "Which host was nearly full?", budget=Budget.parse("300"))
    sent = list(result.prompt.messages)
    assert "host-13 is at 91%." in text(sent)  # the previous answer stays...
    results = [m["content"] for m in sent if m["role"] == "tool"]
    assert results[0].startswith("[result of disk_usage(") and "cleared" in results[0]  # ...what it read does not
    assert results[1] == "host-13 91%"  # the current turn's result is never cleared
    assert result.prompt.tokens == count_messages(sent) <= 300 and not result.prompt.dropped_recent
    assert any(n.startswith("cleared 1 tool result") for n in result.prompt.notes)
    whole = h.ask("loop", "Which host was nearly full?", budget=Budget.parse("2000"))
    assert listing in text(whole.prompt.messages)  # with room, nothing is cleared


# -- the floor itself does not fit: the caller is told ---------------------------------------
def test_adapters_warn_when_the_last_exchanges_do_not_fit(make_history, caplog):
    from semhist.integrations import langchain as lc
    from semhist.integrations import llamaindex as li

    h = make_history()
    young(h)
    with caplog.at_level(logging.WARNING):
        lc.semhist_prompt(h, "young", QUESTION, budget=30)
        li.SemhistMemory.from_defaults(h, "young", budget=30).get(QUESTION)
        lc.semhist_prompt(h, "young", QUESTION, budget=2000)
    warned = [(r.name, r.getMessage()) for r in caplog.records if r.levelno == logging.WARNING]
    assert [name for name, _ in warned] == ["semhist.langchain", "semhist.llamaindex"]
    assert all("dropped" in said and "30 tokens" in said for _, said in warned)
    result = h.ask("young", QUESTION, budget=Budget.parse("30"))
    assert result.prompt.dropped_recent and any(n.startswith("dropped") for n in result.prompt.notes)


def test_the_service_says_so_in_its_notes(make_history):
    from fastapi.testclient import TestClient

    from semhist.service.app import create_app
    from semhist.service.chat import notes_header, prepare

    h = make_history()
    young(h)
    with TestClient(create_app(h.settings, h)) as client:
        got = client.post("/v1/threads/young/context", json={"request": QUESTION, "budget": 30})
    assert got.status_code == 200, got.text
    assert any(n.startswith("dropped ") and "last exchanges" in n for n in got.json()["notes"])
    turn = prepare(h, h.settings, "young", {"model": "m", "messages": [{"role": "user", "content": QUESTION}]},
                   budget=Budget.parse("30"))
    assert "dropped" in notes_header(turn.notes)["X-Semhist-Notes"]
    assert notes_header(()) == {}


# -- `full` past view_limit ------------------------------------------------------------------
def ramen_dicts():
    raw = json.loads((SAMPLES / "ramen.json").read_text())
    return raw["messages"] if isinstance(raw, dict) else raw


def test_full_past_the_view_limit_sends_every_message_and_says_so(make_history):
    whole, long = make_history(), make_history(view_limit=30)  # one store, two limits
    whole.add_many("ramen", ramen_dicts())
    by_view = long.ask("ramen", RAMEN_REQUEST, strategy="full")
    assert by_view.prompt.messages == whole.ask("ramen", RAMEN_REQUEST, strategy="full").prompt.messages
    assert len(by_view.prompt.messages) == len(ramen_dicts()) + 1
    assert any("more than view_limit" in n for n in by_view.prompt.notes)


def test_full_past_what_a_prompt_can_hold_is_refused_unless_budgeted(make_history, monkeypatch):
    from semhist.history import views

    long = make_history(view_limit=30)
    long.add_many("ramen", ramen_dicts())
    monkeypatch.setattr(views, "MAX_PAGED_TOKENS", 500)
    with pytest.raises(TooLongError, match="budget"):
        long.ask("ramen", RAMEN_REQUEST, strategy="full")
    assert long.ask("ramen", RAMEN_REQUEST, strategy="full", budget=Budget.parse("400")).prompt.tokens <= 400


@pytest.mark.parametrize("strategy, budget", [("full", "300"), ("full", "25%"), ("window", None), ("window", "5%"),
                                              ("token-budget", None), ("token-budget", "10%")])
def test_strategies_that_send_the_threads_end_send_the_same_past_the_view_limit(make_history, monkeypatch,
                                                                              strategy, budget):
    from semhist.history import views

    monkeypatch.setattr(views, "PAGE", 4)  # the end is read in pages: 4, 16, 64 messages
    whole, long = make_history(), make_history(view_limit=30)
    whole.add_many("ramen", ramen_dicts())
    limit = Budget.parse(budget) if budget else None
    by_view = long.ask("ramen", RAMEN_REQUEST, strategy=strategy, budget=limit)
    assert len(by_view.thread.messages) < len(ramen_dicts())  # only the end was read...
    assert by_view.prompt.messages == whole.ask("ramen", RAMEN_REQUEST, strategy=strategy,
                                                budget=limit).prompt.messages  # ...and it is what counts


def test_the_cli_says_what_full_sent_and_warns_on_stderr(cache_dir):
    from .test_cli import semhist

    out = json.loads(semhist("ask", str(SAMPLES / "ramen.json"), RAMEN_REQUEST, "--strategy", "full", "--json",
                             cache_dir=cache_dir, env={"SEMHIST_VIEW_LIMIT": "30"}).stdout)
    assert len(out["messages"]) == len(ramen_dicts()) + 1 and any("view_limit" in n for n in out["notes"])
    tight = semhist("ask", str(SAMPLES / "ramen.json"), RAMEN_REQUEST, "--budget", "40", cache_dir=cache_dir)
    assert "note: dropped" in tight.stdout and "dropped" in tight.stderr
