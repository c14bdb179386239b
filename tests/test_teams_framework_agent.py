"""`semhist agent --framework-agent`: a Microsoft Agent Framework agent answers Teams' activities
with semhist as its memory. First with a chat client of the framework's own kind that plays a
tool call and then an answer (recording what it is sent), then the sample in docs/samples on the
packaged model."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("agent_framework", reason="the agent-framework extra")  # in the test extra: always there in CI

from semhist import load

from .conftest import ROOT, SAMPLES
from .test_agent import activity, say, start_agent, stored, stored_ramen

pytestmark = pytest.mark.slow

CONVERSATION = "a:1on1-framework-agent"
FACTORY = textwrap.dedent('''
    import json, os
    from agent_framework import (Agent, BaseChatClient, ChatResponse, Content, FunctionInvocationLayer, Message)

    class Playing(FunctionInvocationLayer, BaseChatClient):
        """A tool call on the first call of a run, then an answer; what it is sent, to a file."""

        def _inner_get_response(self, *, messages, stream, options, **kwargs):
            with open(os.environ["SENT_TO"], "a") as out:
                out.write(json.dumps([[m.role, m.text, [c.type for c in m.contents]] for m in messages]) + "\\n")
            if any(c.type == "function_result" for m in messages for c in m.contents):
                reply = Message("assistant", ["Kita 3F is free; you ordered at Ichiran by ticket machine."])
            else:
                reply = Message("assistant", [Content.from_function_call("call_rooms_1", "free_rooms",
                                                                         arguments={"office": "Sapporo"})])
            async def whole():
                return ChatResponse(messages=[reply])
            return whole()

    def free_rooms(office: str) -> str:
        """The meeting rooms free today at an office."""
        return "Kita 3F (6 seats)" if office.lower() == "sapporo" else "none"

    def build(memory):
        return Agent(Playing(), instructions="Answer from the conversation.", tools=[free_rooms],
                     context_providers=[memory])

    def forgetful(memory):
        return Agent(Playing(), instructions="no memory")
''')


def _stored_ramen(tmp_path, cache_dir) -> int:
    stored_ramen(tmp_path, cache_dir, CONVERSATION)
    return len(load(SAMPLES / "ramen.json").only().messages)


def test_a_framework_agent_answers_from_semhists_prompt_and_its_tool_calls_are_stored(tmp_path, cache_dir):
    (tmp_path / "factory.py").write_text(FACTORY)
    before = _stored_ramen(tmp_path, cache_dir)
    sent_to = tmp_path / "sent.jsonl"
    agent = start_agent(tmp_path, cache_dir, {"SENT_TO": str(sent_to)},
                        args=("--anonymous", "--framework-agent", f"{tmp_path / 'factory.py'}:build"))
    try:
        request = "一蘭ではどうやって注文した？それと札幌の会議室は空いてる？"
        body = activity(request, "1733300000001", CONVERSATION, timestamp="2025-08-12T12:00:00Z")
        body["conversation"] = {"id": CONVERSATION, "conversationType": "personal", "tenantId": "tenant"}
        assert say(agent, body) == ["Kita 3F is free; you ordered at Ichiran by ticket machine."]
        first, second = [json.loads(line) for line in sent_to.read_text().splitlines()]
        texts = [t for _, t, _ in first]
        assert texts[-1] == request and texts.count(request) == 1  # the request once, last
        context = next(t for t in texts if "<retrieved_history>" in t)  # semhist's quoted history
        assert "一蘭" in context
        assert len(first) < before  # semhist's prompt, not the whole thread
        assert second[-2][2] == ["function_call"] and second[-1][2] == ["function_result"]
        msgs = stored(agent, CONVERSATION)
        assert len(msgs) == before + 4  # the request, the call, its result, the answer: once each
        assert [m.role for m in msgs[-4:]] == ["user", "assistant", "tool", "assistant"]
        assert msgs[-3].tool_calls[0]["function"]["name"] == "free_rooms" and "Kita 3F" in msgs[-2].content
        assert msgs[-1].content.startswith("Kita 3F is free")
    finally:
        agent.stop()


def test_a_factory_whose_agent_ignores_its_memory_stops_the_start_and_says_why(tmp_path, cache_dir):
    (tmp_path / "factory.py").write_text(FACTORY)
    for target, expected in ((f"{tmp_path / 'factory.py'}:forgetful", "context_providers=[memory]"),
                             (f"{tmp_path / 'factory.py'}:missing", "has no function missing"),
                             (f"{tmp_path / 'nowhere.py'}:build", "no file"), ("no-colon", "FILE.py:NAME")):
        run = subprocess.run([sys.executable, "-m", "semhist.cli", "agent", "--anonymous", "--port", "0",
                              "--framework-agent", target], capture_output=True, text=True, timeout=120,
                             env={**__import__("os").environ, "SEMHIST_DATA_DIR": str(tmp_path / "data"),
                                  "SEMHIST_CACHE_DIR": str(cache_dir)})
        assert run.returncode != 0 and expected in run.stderr and "Traceback" not in run.stderr, (target, run.stderr)


@pytest.mark.llm
def test_the_teams_sample_answers_on_the_packaged_model(tmp_path, cache_dir, llm_env):
    before = _stored_ramen(tmp_path, cache_dir)
    agent = start_agent(tmp_path, cache_dir, {**llm_env, "SEMHIST_LLM_TIMEOUT": "400"}, args=(
        "--anonymous", "--framework-agent", f"{ROOT / 'docs' / 'samples' / 'teams_agent_framework.py'}:build"))
    try:
        body = activity("一蘭ではどうやって注文した？", "1733300000002", CONVERSATION, timestamp="2025-08-12T12:00:00Z")
        body["conversation"] = {"id": CONVERSATION, "conversationType": "personal", "tenantId": "tenant"}
        replies = say(agent, body, timeout=400)
        assert len(replies) == 1 and replies[0].strip() and not replies[0].startswith("Sorry"), replies
        msgs = stored(agent, CONVERSATION)
        assert msgs[before].content == "一蘭ではどうやって注文した？" and msgs[-1].role == "assistant"
        assert msgs[-1].content == replies[0]
    finally:
        agent.stop()
