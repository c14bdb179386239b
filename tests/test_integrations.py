"""The LangChain, LangGraph and LlamaIndex adapters on a real History (SQLite, USE-m3). The
models are the frameworks' own test models (FakeListChatModel, GenericFakeChatModel, MockLLM)."""

from __future__ import annotations

import asyncio
import importlib
import sys
import warnings

import pytest

from semhist.kernel.errors import ConfigError, InputError
from semhist.kernel.settings import Settings
from semhist.kernel.tokens import count_messages, count_text
from .conftest import RAMEN_REQUEST, RAMEN_TURNS

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import FakeListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory
from langchain_core.tools import tool
from llama_index.core.base.llms.types import ChatMessage, ImageBlock, TextBlock, ToolCallBlock

from semhist.integrations import langchain as lc
from semhist.integrations import llamaindex as li


@pytest.fixture
def history(tmp_path, cache_dir):
    from semhist import History

    settings = Settings.load(env={}, cache_dir=cache_dir, data_dir=tmp_path / "data",
                             db=f"sqlite:///{tmp_path / 'db.sqlite3'}")
    h = History(settings, llm=None)
    yield h
    h.close()


class Seen(BaseCallbackHandler):
    """What each chat-model call was sent, as LangChain delivers it to callbacks."""

    def __init__(self):
        self.calls = []

    def on_chat_model_start(self, serialized, messages, **kwargs):
        self.calls.append(messages[0])


class ToolCallingFake(GenericFakeChatModel):
    """LangChain's fake chat model, bindable to tools so that create_react_agent takes it."""

    def bind_tools(self, tools, **kwargs):
        return self


@tool
def lookup(shop: str) -> str:
    """Where a ramen shop is."""
    return f"{shop}: 札幌"


def ramen_dicts(ramen):
    return [{**m.to_openai(), "timestamp": m.timestamp.isoformat()} for m in ramen.messages]


def ramen_langchain(ramen):
    out = []
    for i, d in enumerate(ramen_dicts(ramen)):
        kind = HumanMessage if d["role"] == "user" else AIMessage
        out.append(kind(d["content"], id=f"ramen-{i}", additional_kwargs={"timestamp": d["timestamp"]}))
    return out


def kept_ramen(ramen, text: str) -> int:
    return sum(ramen.messages[i].content in text for i in RAMEN_TURNS)


def as_text(messages) -> str:
    return "\n".join(str(m.content) for m in messages)


# -- LangChain: the chat message history ---------------------------------------------------
def test_langchain_roles_names_and_tool_calls_round_trip(history):
    hist = lc.SemhistChatMessageHistory(history, "lc-roundtrip")
    call = {"name": "lookup", "args": {"shop": "一蘭", "spicy": 2}, "id": "call-1", "type": "tool_call"}
    sent = [SystemMessage("Answer briefly.", id="s1"), HumanMessage("一蘭はどこ？", name="Taro Yamada", id="h1"),
            AIMessage("", tool_calls=[call], id="a1"), ToolMessage("一蘭: 福岡", tool_call_id="call-1", name="lookup", id="t1"),
            AIMessage("福岡です。", name="bot", id="a2",
                      invalid_tool_calls=[{"name": "lookup", "args": "{not json", "id": "call-2", "error": None,
                                           "type": "invalid_tool_call"}])]
    hist.add_messages(sent)
    got = hist.messages
    assert [type(m) for m in got] == [type(m) for m in sent]
    assert [m.content for m in got] == [m.content for m in sent]
    assert got[1].name == "Taro Yamada" and got[3].name == "lookup" and got[4].name == "bot"
    assert got[2].tool_calls == [call]
    assert got[3].tool_call_id == "call-1"
    assert [(c["id"], c["args"]) for c in got[4].invalid_tool_calls] == [("call-2", "{not json")]
    assert all(m.id.startswith("semhist:") for m in got)


def test_langchain_adding_the_same_messages_again_stores_nothing(history):
    hist = lc.SemhistChatMessageHistory(history, "lc-idempotent")
    hist.add_messages([HumanMessage("hello", id="h1"), AIMessage("hi", id="a1")])
    hist.add_messages([HumanMessage("hello", id="h1"), AIMessage("hi", id="a1")])  # a retry
    hist.add_messages(hist.messages)  # what it handed out, handed back
    hist.add_message(AIMessage("hi", id="a1"))
    assert [m.content for m in hist.messages] == ["hello", "hi"]
    assert len(lc.SemhistChatMessageHistory(history, "lc-idempotent", last=1).messages) == 1


def test_langchain_clear_forgets_and_tolerates_an_unknown_thread(history):
    hist = lc.SemhistChatMessageHistory(history, "lc-clear")
    hist.clear()  # never stored
    hist.add_user_message("remember me")
    hist.clear()
    assert hist.messages == [] and history.store.count("lc-clear") == 0
    with pytest.raises(InputError):
        lc.SemhistChatMessageHistory(history, "t", last=0)


@pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")
def test_runnable_with_message_history_stores_each_turn_once(history):
    seen = Seen()
    model = FakeListChatModel(responses=["一蘭です。", "札幌です。", "はい。"], callbacks=[seen])
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{question}")])
    chain = RunnableWithMessageHistory(prompt | model, lc.history_factory(history), input_messages_key="question",
                                       history_messages_key="history")
    config = {"configurable": {"session_id": "rwmh"}}
    assert chain.invoke({"question": "おすすめのラーメン屋は？"}, config).content == "一蘭です。"
    assert chain.invoke({"question": "どこにある？"}, config).content == "札幌です。"
    asyncio.run(chain.ainvoke({"question": "ありがとう"}, config))
    stored = history.store.messages("rwmh")
    assert [(m.role, m.content) for m in stored] == [
        ("user", "おすすめのラーメン屋は？"), ("assistant", "一蘭です。"), ("user", "どこにある？"),
        ("assistant", "札幌です。"), ("user", "ありがとう"), ("assistant", "はい。")]
    assert [m.content for m in seen.calls[1]] == ["おすすめのラーメン屋は？", "一蘭です。", "どこにある？"]


def test_semhist_prompt_on_an_empty_thread_is_the_request(history):
    got = lc.semhist_prompt(history, "nothing-yet", "hello", system_prompt="Be brief.")
    assert [(type(m), m.content) for m in got] == [(SystemMessage, "Be brief."), (HumanMessage, "hello")]
    with pytest.raises(InputError):
        lc.pre_model_hook(history, budget="lots")


# -- LangGraph: the pre-model hook -----------------------------------------------------------
def react_agent(model, history, tools=(), **hook):
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in favour of langchain.agents
        return create_react_agent(model, list(tools), pre_model_hook=lc.pre_model_hook(history, **hook),
                                  post_model_hook=lc.post_model_hook(history), checkpointer=InMemorySaver())


def test_langgraph_model_sees_semhist_selection_while_the_state_keeps_everything(history, ramen):
    seen = Seen()
    agent = react_agent(FakeListChatModel(responses=["一蘭とすみれの話でした。", "晴れです。"], callbacks=[seen]), history)
    config = {"configurable": {"thread_id": "graph-ramen"}}
    state = ramen_langchain(ramen) + [HumanMessage(RAMEN_REQUEST)]
    out = agent.invoke({"messages": state}, config)
    assert len(out["messages"]) == len(state) + 1  # the state keeps every message and the reply
    sent = seen.calls[0]
    assert kept_ramen(ramen, as_text(sent)) == len(RAMEN_TURNS)
    assert sent[-1].content == RAMEN_REQUEST and sum(m.content == RAMEN_REQUEST for m in sent) == 1
    full = count_messages(lc.to_openai(state))
    assert count_messages(lc.to_openai(sent)) < 0.7 * full
    assert history.store.count("graph-ramen") == len(state) + 1  # the reply too (post-model hook)
    asyncio.run(agent.ainvoke({"messages": [HumanMessage("今日の天気は？")]}, config))  # the sync hooks run async too
    assert history.store.count("graph-ramen") == len(state) + 3  # no message stored twice


def test_langgraph_tool_loop_keeps_calls_intact_and_sends_the_request_once(history):
    call = {"name": "lookup", "args": {"shop": "すみれ"}, "id": "call-7", "type": "tool_call"}
    seen = Seen()
    model = ToolCallingFake(messages=iter([AIMessage("", tool_calls=[call]), AIMessage("札幌です。")]), callbacks=[seen])
    agent = react_agent(model, history, tools=[lookup], budget="90%")
    out = agent.invoke({"messages": [HumanMessage("すみれはどこ？")]}, {"configurable": {"thread_id": "graph-tools"}})
    assert out["messages"][-1].content == "札幌です。"
    second = seen.calls[1]
    assert [type(m) for m in second[-3:]] == [HumanMessage, AIMessage, ToolMessage]
    assert second[-2].tool_calls == [call] and second[-1].content == "すみれ: 札幌"
    stored = lc.SemhistChatMessageHistory(history, "graph-tools").messages
    assert [type(m) for m in stored] == [HumanMessage, AIMessage, ToolMessage, AIMessage]
    assert stored[1].tool_calls == [call] and stored[2].tool_call_id == "call-7"


def test_langgraph_hook_needs_the_thread_id(history):
    hook = lc.pre_model_hook(history)
    with pytest.raises(InputError, match="thread_id"):
        hook({"messages": [HumanMessage("hi")]}, {"configurable": {}})


def test_create_agent_middleware_sends_semhists_prompt_and_stores_the_tool_loop(history, ramen):
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from semhist.integrations.langchain_agents import SemhistMiddleware

    call = {"name": "lookup", "args": {"shop": "一蘭"}, "id": "call-9", "type": "tool_call"}
    seen = Seen()
    model = ToolCallingFake(messages=iter([AIMessage("", tool_calls=[call]), AIMessage("札幌です。")]), callbacks=[seen])
    agent = create_agent(model, [lookup], system_prompt="Answer from the conversation.", checkpointer=InMemorySaver(),
                         middleware=[SemhistMiddleware(history, budget=600)])
    state = ramen_langchain(ramen) + [HumanMessage(RAMEN_REQUEST)]
    out = agent.invoke({"messages": state}, {"configurable": {"thread_id": "agent-ramen"}})
    assert out["messages"][-1].content == "札幌です。" and len(out["messages"]) == len(state) + 3  # the state keeps all
    first, second = seen.calls
    assert isinstance(first[0], SystemMessage) and first[0].content == "Answer from the conversation."
    assert sum(isinstance(m, SystemMessage) and m.content == "Answer from the conversation." for m in first) == 1
    assert first[-1].content == RAMEN_REQUEST and sum(m.content == RAMEN_REQUEST for m in first) == 1
    assert count_messages(lc.to_openai(first)) < 0.7 * count_messages(lc.to_openai(state))
    assert [type(m) for m in second[-3:]] == [HumanMessage, AIMessage, ToolMessage]  # the loop's turn whole
    stored = lc.SemhistChatMessageHistory(history, "agent-ramen").messages
    assert len(stored) == len(state) + 3 and [type(m) for m in stored[-3:]] == [AIMessage, ToolMessage, AIMessage]
    assert stored[-3].tool_calls == [call] and stored[-1].content == "札幌です。"


@pytest.mark.parametrize("module, package, extra", [("langchain", "langchain_core", "langchain"),
                                                     ("langchain_agents", "langchain", "langchain"),
                                                     ("llamaindex", "llama_index", "llamaindex")])
def test_missing_extra_names_it(monkeypatch, module, package, extra):
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, f"semhist.integrations.{module}")
    with pytest.raises(ConfigError, match=rf"semhist\[{extra}\]"):
        importlib.import_module(f"semhist.integrations.{module}")


# -- LlamaIndex ------------------------------------------------------------------------------
def test_llamaindex_memory_put_get_all_and_reset(history):
    memory = li.SemhistMemory.from_defaults(history, "li-memory", token_limit=2000)
    assert memory.budget == "2000"
    legacy = {"id": "call-2", "type": "function", "function": {"name": "lookup", "arguments": '{"shop": "一蘭"}'}}
    memory.put_messages([
        ChatMessage(role="user", content="一蘭とすみれはどこ？", additional_kwargs={"name": "Taro Yamada"}),
        ChatMessage(role="assistant", blocks=[ToolCallBlock(tool_call_id="call-1", tool_name="lookup",
                                                            tool_kwargs={"shop": "すみれ"})],
                    additional_kwargs={"tool_calls": [legacy]}),
        ChatMessage(role="tool", content="すみれ: 札幌", additional_kwargs={"tool_call_id": "call-1"}),
        ChatMessage(role="tool", content="一蘭: 福岡", additional_kwargs={"tool_call_id": "call-2"})])
    loop = memory.get()  # mid tool loop: the turn ends the prompt, the request is sent once
    assert [m.role.value for m in loop[-4:]] == ["user", "assistant", "tool", "tool"]
    assert sum(m.content == "一蘭とすみれはどこ？" for m in loop) == 1
    memory.put(ChatMessage(role="chatbot", content="札幌と福岡です。"))
    got = memory.get_all()
    assert [m.role.value for m in got] == ["user", "assistant", "tool", "tool", "assistant"]
    assert got[0].additional_kwargs == {"name": "Taro Yamada"}
    calls = [(b.tool_call_id, b.tool_kwargs) for b in got[1].blocks if isinstance(b, ToolCallBlock)]
    assert calls == [("call-1", {"shop": "すみれ"}), ("call-2", {"shop": "一蘭"})]
    assert got[3].additional_kwargs == {"tool_call_id": "call-2"} and got[3].content == "一蘭: 福岡"
    prompt = memory.get("すみれは？")
    assert prompt[-1].content == "すみれは？" and "札幌と福岡です。" in as_text(prompt)
    memory.set(got + [ChatMessage(role="user", content="ありがとう")])  # continues the thread: appended
    assert len(memory.get_all()) == 6
    memory.set([ChatMessage(role="user", content="new start")])
    assert [m.content for m in memory.get_all()] == ["new start"]
    memory.reset()
    assert memory.get_all() == [] and memory.get() == []
    with pytest.raises(InputError, match="message 1"):
        li.to_openai([ChatMessage(role="user", content="x"), "not a message"])
    with pytest.raises(InputError, match="ImageBlock"):
        memory.put(ChatMessage(role="user", blocks=[TextBlock(text="see"), ImageBlock(url="https://example.com/a.png")]))


def test_llamaindex_simple_chat_engine_sends_semhist_prompt(history, ramen):
    from llama_index.core.chat_engine import SimpleChatEngine
    from llama_index.core.llms import MockLLM

    history.add_many("li-ramen", ramen_dicts(ramen))
    memory = li.SemhistMemory.from_defaults(history, "li-ramen")
    engine = SimpleChatEngine.from_defaults(llm=MockLLM(), memory=memory)  # MockLLM echoes its prompt
    seen = str(engine.chat(RAMEN_REQUEST))
    assert kept_ramen(ramen, seen) == len(RAMEN_TURNS) and seen.count(RAMEN_REQUEST) == 1
    assert count_text(seen) < 0.7 * count_messages(ramen_dicts(ramen))
    stored = history.store.messages("li-ramen")
    assert len(stored) == len(ramen.messages) + 2 and stored[-2].content == RAMEN_REQUEST


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the workflow inspects its pydantic agent
def test_llamaindex_function_agent_stores_its_tool_loop(history):
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.llms.mock import MockFunctionCallingLLMWithChatMemoryOfLastCall
    from llama_index.core.tools import FunctionTool

    def where(shop: str = "すみれ") -> str:
        """Where a ramen shop is."""
        return f"{shop}: 札幌"

    llm = MockFunctionCallingLLMWithChatMemoryOfLastCall()  # calls every tool once, then answers
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(where)], llm=llm)
    memory = li.SemhistMemory.from_defaults(history, "li-agent")

    async def run():
        return await agent.run(user_msg="すみれはどこ？", memory=memory)

    assert str(asyncio.run(run())) == "Tool calls complete."
    assert [m.content for m in llm.last_chat_messages] == ["すみれはどこ？", None, "すみれ: 札幌"]
    stored = memory.get_all()
    assert [m.role.value for m in stored] == ["user", "assistant", "tool", "assistant"]
    (call,) = stored[1].blocks
    assert (call.tool_name, call.tool_kwargs) == ("where", {"shop": "すみれ"})
    assert stored[2].additional_kwargs == {"tool_call_id": call.tool_call_id}


def test_llamaindex_memory_block_recalls_what_left_the_queue(history, ramen):
    from llama_index.core.memory import Memory

    block = li.SemhistMemoryBlock(history=history)
    memory = Memory.from_defaults(session_id="li-block", token_limit=400, memory_blocks=[block])
    memory.put_messages([ChatMessage(role=d["role"], content=d["content"], additional_kwargs={"timestamp": d["timestamp"]})
                         for d in ramen_dicts(ramen)])
    memory.put(ChatMessage(role="user", content=RAMEN_REQUEST))
    assert history.store.count("li-block") > 40  # the queue flushed into semhist
    got = memory.get()
    assert "<retrieved_history>" in as_text(got[:1])
    assert ramen.messages[3].content in as_text(got)  # 一蘭, long gone from the queue
