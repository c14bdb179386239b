"""OpenAI Agents SDK session: the SDK's own `Runner` with a model of its `Model` interface that
plays back fixed turns (a tool call, then an answer) and keeps what it was given; semhist
stores every item and hands the model its prompt. Then one run against the packaged model."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("agents", reason="the openai-agents extra")  # in the test extra: always there in CI

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage, function_tool, set_tracing_disabled
from agents.memory import Session, SessionSettings
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from semhist import load
from semhist.integrations.openai_agents import SemhistSession

from .conftest import RAMEN_REQUEST, SAMPLES

set_tracing_disabled(True)  # nothing leaves the machine


class PlayedBack(Model):
    """Answers each call with the next of `turns` and keeps every input it was given."""

    def __init__(self, turns):
        self.turns, self.inputs = list(turns), []

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                           tracing, *, previous_response_id, conversation_id, prompt):
        self.inputs.append(input)
        return ModelResponse(output=self.turns.pop(0), usage=Usage(requests=1), response_id=None)

    async def stream_response(self, *args, **kwargs):
        raise NotImplementedError
        yield


def said(text: str, id: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(id=id, type="message", role="assistant", status="completed",
                                 content=[ResponseOutputText(type="output_text", text=text, annotations=[])])


@function_tool
def opening_hours(shop: str) -> str:
    """When a ramen shop is open."""
    return f"{shop}: 11:00-23:00"


@pytest.fixture
def session(make_history):
    h = make_history(layout="cache")
    s = SemhistSession(h, "ramen-agents", budget=600)
    h.ingest(s.thread, load(SAMPLES / "ramen.json").only())
    return s


def test_a_run_gets_semhists_prompt_and_every_item_is_stored_paired(session):
    assert isinstance(session, Session)
    h, before = session.history, session.history.store.count(session.thread)
    model = PlayedBack([
        [ResponseFunctionToolCall(id="fc_1", call_id="call_1", type="function_call", name="opening_hours",
                                  arguments='{"shop": "一蘭"}')],
        [said("一蘭は11時から23時までです。", "msg_1")]])
    agent = Agent(name="ramen", instructions="Answer from the conversation.", model=model, tools=[opening_hours])
    result = asyncio.run(Runner.run(agent, RAMEN_REQUEST, session=session,
                                    run_config=RunConfig(session_input_callback=session.prompt)))
    assert result.final_output == "一蘭は11時から23時までです。"
    first = model.inputs[0]
    assert first[-1] == {"role": "user", "content": RAMEN_REQUEST}
    assert "<retrieved_history>" in first[-2]["content"] and first[-2]["role"] == "user"
    assert len(first) < before  # the prompt, not the thread
    stored = h.store.messages(session.thread)[before:]
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1].tool_calls[0]["id"] == "call_1" and stored[2].tool_call_id == "call_1"
    assert stored[3].content == "一蘭は11時から23時までです。"
    # the SDK hands the same items again (a retry): stored once
    asyncio.run(session.add_items([{"type": "function_call_output", "call_id": "call_1", "output": "x"}]))
    assert h.store.count(session.thread) == before + 4


def test_get_items_gives_the_newest_items_never_the_whole_thread(session):
    everything = session.history.store.count(session.thread)
    assert 0 < len(asyncio.run(session.get_items())) < everything
    assert [i["content"] for i in asyncio.run(session.get_items(limit=2))] == \
        [m.content for m in session.history.store.messages(session.thread, last=2)]
    assert asyncio.run(session.get_items(limit=0)) == []
    limited = SemhistSession(session.history, "ramen-agents", session_settings=SessionSettings(limit=3))
    assert len(asyncio.run(limited.get_items())) == 3


def test_pop_and_clear_forget(session):
    last = session.history.store.messages(session.thread, last=1)[0]
    popped = asyncio.run(session.pop_item())
    assert popped["content"] == last.content
    assert session.history.store.messages(session.thread, last=1)[0].id != last.id
    asyncio.run(session.clear_session())
    assert not session.history.store.count(session.thread)
    assert asyncio.run(session.pop_item()) is None and asyncio.run(session.get_items()) == []


@pytest.mark.llm
@pytest.mark.slow
def test_an_agent_on_the_local_model_answers_from_semhists_prompt(session, llm_server):
    from agents import OpenAIChatCompletionsModel
    from openai import AsyncOpenAI

    from semhist.llm.server import MODEL_NAME

    model = OpenAIChatCompletionsModel(model=MODEL_NAME, openai_client=AsyncOpenAI(base_url=llm_server,
                                                                                   api_key="local"))
    agent = Agent(name="ramen", instructions="Answer in one short sentence, from the conversation.", model=model)
    before = session.history.store.count(session.thread)
    result = asyncio.run(Runner.run(agent, "一蘭ではどうやって注文した？", session=session,
                                    run_config=RunConfig(session_input_callback=session.prompt)))
    assert str(result.final_output).strip()
    stored = session.history.store.messages(session.thread)
    assert len(stored) == before + 2 and stored[-1].content == result.final_output


def test_replies_of_a_chat_completions_model_are_each_stored(session):
    """The SDK gives every message from a chat-completions model the id "__fake_id__": a second
    reply keyed by it was taken for the first and never stored (found by docs/samples)."""
    from agents.models.fake_id import FAKE_RESPONSES_ID

    before = session.history.store.count(session.thread)
    for text in ("platform 3", "at 7:40"):
        asyncio.run(session.add_items([{"role": "user", "content": f"when? {text}"},
                                       {"id": FAKE_RESPONSES_ID, "type": "message", "role": "assistant",
                                        "status": "completed",
                                        "content": [{"type": "output_text", "text": text, "annotations": []}]}]))
    assert [m.content for m in session.history.store.messages(session.thread)[before:]] == [
        "when? platform 3", "platform 3", "when? at 7:40", "at 7:40"]


def test_planted_text_stays_data_in_the_runs_input(make_history):
    """The injection corpus (tests/injection), stored in one thread, as the Runner's model gets it."""
    from .injection import CORPUS, REQUEST, check_prompt, planted_thread

    h = make_history()
    s = SemhistSession(h, "planted-agents", budget=6000)
    h.add_many(s.thread, planted_thread(CORPUS))
    model = PlayedBack([[said("Noted.", "msg_1")]])
    agent = Agent(name="planted", instructions="Answer from the conversation.", model=model)
    asyncio.run(Runner.run(agent, REQUEST, session=s, run_config=RunConfig(session_input_callback=s.prompt)))
    shown = check_prompt([_as_message(m) for m in model.inputs[0] if isinstance(m, dict) and (
        "role" in m or m.get("type") in ("function_call", "function_call_output"))], *CORPUS)
    assert len(shown) == len(CORPUS), {c["id"] for c in CORPUS} - shown


def _as_message(item: dict) -> dict:
    """An input item as the chat message the check reads: a thread that fits the budget is sent
    whole, its tool calls and results as the SDK's items, not quoted in the retrieved history."""
    if item.get("type") == "function_call":
        return {"role": "assistant", "content": None,
                "tool_calls": [{"function": {"name": item["name"], "arguments": item["arguments"]}}]}
    if item.get("type") == "function_call_output":
        return {"role": "tool", "content": str(item.get("output"))}
    return item


def test_a_reply_the_same_as_one_in_the_prompt_is_stored_too(session):
    """The prompt hands the SDK earlier replies; the SDK does not hand them back to be stored,
    so a new reply that says the same words was once taken for one of them and dropped."""
    h, before = session.history, session.history.store.count(session.thread)
    model = PlayedBack([[said("一蘭です。", "msg_a")], [said("一蘭です。", "msg_b")]])
    agent = Agent(name="ramen", instructions="Answer from the conversation.", model=model)
    for request in (RAMEN_REQUEST, "どの店でしたっけ？"):
        asyncio.run(Runner.run(agent, request, session=session,
                               run_config=RunConfig(session_input_callback=session.prompt)))
    stored = h.store.messages(session.thread)[before:]
    assert [(m.role, m.content) for m in stored] == [
        ("user", RAMEN_REQUEST), ("assistant", "一蘭です。"), ("user", "どの店でしたっけ？"), ("assistant", "一蘭です。")]
