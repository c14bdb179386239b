"""Microsoft Agent Framework providers: a real `Agent` with a chat client of the framework's own
kind (a `BaseChatClient` that records what it is sent and answers), semhist storing each run
and handing the model its prompt; then one run against the packaged local model."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("agent_framework", reason="the agent-framework extra")  # in the test extra: always there in CI

from agent_framework import (Agent, BaseChatClient, ChatResponse, ChatResponseUpdate, Content, Message,
                             ResponseStream)

from semhist import load
from semhist.integrations.agent_framework import (SemhistContextProvider, SemhistHistoryProvider, from_openai,
                                                  thread_of, to_openai)

from .conftest import RAMEN_REQUEST, SAMPLES


class Recording(BaseChatClient):
    """Answers every call with a fixed text and keeps the messages it was sent."""

    def __init__(self, answer: str = "一蘭と一風堂の話でした。"):
        super().__init__()
        self.answer, self.sent = answer, []

    def _inner_get_response(self, *, messages, stream, options, **kwargs):
        self.sent.append(list(messages))
        if stream:
            async def updates():
                yield ChatResponseUpdate(role="assistant", contents=[Content.from_text(self.answer)])
            return ResponseStream(updates(), finalizer=ChatResponse.from_updates)

        async def whole():
            return ChatResponse(messages=[Message("assistant", [self.answer])])
        return whole()


@pytest.fixture
def ramen_history(make_history):
    h = make_history(layout="cache")  # the context just before the input (SEMHIST_LAYOUT, or a billed budget)
    h.ingest(thread_of("ramen-session"), load(SAMPLES / "ramen.json").only())
    return h


def test_the_context_provider_sends_semhists_prompt_and_stores_the_run(ramen_history):
    h, client = ramen_history, Recording()
    thread = thread_of("ramen-session")
    before = h.store.count(thread)
    agent = Agent(client=client, instructions="Answer from the conversation.",
                  context_providers=[SemhistContextProvider(h, budget="600")])
    session = agent.create_session(session_id="ramen-session")
    reply = asyncio.run(agent.run(RAMEN_REQUEST, session=session))
    assert reply.text == client.answer
    sent = client.sent[-1]
    texts = [m.text for m in sent]
    assert texts[-1] == RAMEN_REQUEST and texts.count(RAMEN_REQUEST) == 1  # the input, once, last
    assert "<retrieved_history>" in texts[-2] and sent[-2].role == "user"  # quoted history, just before it
    assert len(sent) < before  # not the whole thread
    stored = h.store.messages(thread)
    assert len(stored) == before + 2 and [m.role for m in stored[-2:]] == ["user", "assistant"]
    assert stored[-2].content == RAMEN_REQUEST and stored[-1].content == client.answer
    # a second run, streamed: its turn stored once, the first turn now among the recent ones
    async def streamed():
        stream = agent.run("一蘭の注文方法は？", session=session, stream=True)
        async for _ in stream:
            pass
        return await stream.get_final_response()
    assert asyncio.run(streamed()).text == client.answer
    assert h.store.count(thread) == before + 4
    assert RAMEN_REQUEST in [m.text for m in client.sent[-1]]
    assert all(sum(1 for m in client.sent[-1] if m.text == t) == 1 for t in ("一蘭の注文方法は？",))


def test_the_history_provider_replays_the_thread_as_stored(ramen_history):
    h, client = ramen_history, Recording()
    agent = Agent(client=client, context_providers=[SemhistHistoryProvider(h, last=6)])
    asyncio.run(agent.run("続けて", session=agent.create_session(session_id="ramen-session")))
    stored = [m.content for m in h.store.messages(thread_of("ramen-session"))]
    assert [m.text for m in client.sent[-1]] == stored[-8:-2] + ["続けて"]  # the newest 6 as they were, then the input
    assert stored[-2:] == ["続けて", client.answer]


def test_tool_calls_and_results_survive_the_round_trip():
    call = Content.from_function_call("call_1", "weather", arguments={"city": "Sapporo"})
    result = Content.from_function_result("call_1", result={"temp": -3})
    messages = [Message("user", ["weather?"], message_id="m1"), Message("assistant", [call], message_id="m2"),
                Message("tool", [result], message_id="m3"), Message("assistant", ["-3 degrees"], author_name="bot")]
    dicts = to_openai(messages)
    assert dicts[1]["tool_calls"][0]["function"] == {"name": "weather", "arguments": '{"city": "Sapporo"}'}
    assert dicts[2] == {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": -3}', "id": "m3:0"}
    back = from_openai(dicts)
    assert [m.role for m in back] == ["user", "assistant", "tool", "assistant"]
    assert back[1].contents[0].call_id == "call_1" and json.loads(back[2].contents[0].result) == {"temp": -3}
    assert back[3].author_name == "bot" and back[0].message_id == "m1"


def test_a_run_without_a_session_id_is_refused_with_the_fix():
    from semhist import InputError

    with pytest.raises(InputError, match="create_session"):
        thread_of(None)
    assert thread_of("19:abc@thread.tacv2") == "19:abc@thread.tacv2"
    assert thread_of("a session id with spaces").startswith("af-")


@pytest.mark.llm
@pytest.mark.slow
def test_an_agent_on_the_local_model_answers_from_semhists_prompt(ramen_history, llm_server):
    from agent_framework.openai import OpenAIChatCompletionClient

    from semhist.llm.server import MODEL_NAME

    client = OpenAIChatCompletionClient(model=MODEL_NAME, base_url=llm_server, api_key="local")
    agent = Agent(client=client, instructions="Answer in one short sentence, from the conversation.",
                  context_providers=[SemhistContextProvider(ramen_history, budget="800")])
    reply = asyncio.run(agent.run("一蘭ではどうやって注文した？", session=agent.create_session(session_id="ramen-session"),
                                  options={"max_tokens": 60}))
    assert reply.text.strip()
    stored = ramen_history.store.messages(thread_of("ramen-session"))
    assert stored[-1].role == "assistant" and stored[-1].content == reply.text


def test_planted_text_stays_data_in_the_agents_prompt(make_history):
    """The injection corpus (tests/injection), stored in one thread, as the agent's model gets it."""
    from .injection import CORPUS, REQUEST, check_prompt, planted_thread

    h, client = make_history(), Recording()
    h.add_many(thread_of("planted-session"), planted_thread(CORPUS))
    agent = Agent(client=client, instructions="Answer from the conversation.",
                  context_providers=[SemhistContextProvider(h, budget=6000)])
    asyncio.run(agent.run(REQUEST, session=agent.create_session(session_id="planted-session")))
    shown = check_prompt(to_openai(client.sent[-1]), *CORPUS)
    assert len(shown) == len(CORPUS), {c["id"] for c in CORPUS} - shown
