"""The samples the README's integrations table points to (docs/samples/) run as a user runs
them: `python docs/samples/NAME.py`, on the packaged model where they need one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from semhist.indexers.store import open_store

from .conftest import ROOT
from .servers import Process

pytestmark = pytest.mark.slow

SAMPLES = ROOT / "docs" / "samples"


def run_sample(name: str, tmp_path, cache_dir, **env: str) -> str:
    full = {**os.environ, "SEMHIST_DATA_DIR": str(tmp_path / "data"), "SEMHIST_CACHE_DIR": str(cache_dir), **env}
    out = subprocess.run([sys.executable, str(SAMPLES / name)], env=full, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"{name}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def stored(tmp_path, thread: str) -> list:
    store = open_store(f"sqlite:///{tmp_path / 'data' / 'semhist.sqlite3'}")
    try:
        return store.messages(thread) if store.has_thread(thread) else []
    finally:
        store.close()


def test_the_mcp_sample_adds_and_finds(tmp_path, cache_dir):
    pytest.importorskip("mcp", reason="the mcp extra")
    out = run_sample("mcp_client.py", tmp_path, cache_dir)
    assert "platform 3" in out
    run_sample("mcp_client.py", tmp_path, cache_dir)  # run again: the keys keep each message once
    assert len(stored(tmp_path, "sample-mcp")) == 2


def _two_turns_answered(out: str, messages: list) -> None:
    turns = out.split("> ")[1:]
    assert len(turns) == 2 and all(t.split("\n", 1)[1].strip() for t in turns), out
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    assert "platform 3" in messages[0].content


@pytest.mark.llm
@pytest.mark.parametrize("name,thread", [("agent_framework_memory.py", "sample-agent-framework"),
                                         ("openai_agents_session.py", "sample-openai-agents")])
def test_a_framework_sample_answers_on_the_packaged_model(name, thread, tmp_path, cache_dir, llm_env):
    pytest.importorskip("agents" if "openai" in name else "agent_framework")
    out = run_sample(name, tmp_path, cache_dir, **llm_env, SEMHIST_KEYWORD="local")  # one model call a turn
    _two_turns_answered(out, stored(tmp_path, thread))


@pytest.mark.llm
def test_the_responses_sample_answers_through_the_proxy(tmp_path, cache_dir, llm_server):
    env = {"SEMHIST_DATA_DIR": str(tmp_path / "data"), "SEMHIST_CACHE_DIR": str(cache_dir)}
    server = Process(["serve", "--upstream", llm_server], env, tmp_path / "serve.log")
    try:
        out = run_sample("responses_api.py", tmp_path, cache_dir, SEMHIST_URL=server.url + "/v1")
    finally:
        server.stop()
    _two_turns_answered(out, stored(tmp_path, "sample-responses"))
