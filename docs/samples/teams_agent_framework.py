"""A Teams bot whose answers come from a Microsoft Agent Framework agent, with semhist as its memory.

    pip install 'semhist[teams,agent-framework]'
    semhist llm-server --port 8080 &        # or any OpenAI-compatible endpoint
    export OPENAI_BASE_URL=http://127.0.0.1:8080/v1 SEMHIST_LLM_MODEL=qwen2.5-coder-1.5b-instruct-q4_k_m
    semhist agent --anonymous --framework-agent docs/samples/teams_agent_framework.py:build

`semhist agent` receives Teams' activities and stores every message and reply of the
conversation; before each run the agent gets semhist's prompt for the newest message (the
recent turns, then the retrieved history as quoted conversation) from `memory`, the
`SemhistContextProvider` the host hands to `build`. The agent's instructions and tools are yours;
its tool calls and their results are stored in the thread between the request and the answer.
"""

from __future__ import annotations

import os
from typing import Annotated

from agent_framework import Agent
from agent_framework.openai import OpenAIChatCompletionClient

ROOMS = {"sapporo": ["Kita 3F (6 seats)", "Odori 5F (12 seats)"], "tokyo": ["Marunouchi 21F (8 seats)"]}


def free_rooms(office: Annotated[str, "the office: Sapporo or Tokyo"]) -> str:
    """The meeting rooms free today at an office."""
    rooms = ROOMS.get(office.strip().lower())
    return ", ".join(rooms) if rooms else f"no office called {office}"


def build(memory) -> Agent:
    client = OpenAIChatCompletionClient(
        model=os.environ.get("SEMHIST_LLM_MODEL", "qwen2.5-coder-1.5b-instruct-q4_k_m"),
        base_url=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"),
        api_key=os.environ.get("OPENAI_API_KEY", "local"))
    return Agent(client, instructions="You are the team's assistant in Microsoft Teams. Answer briefly, from the "
                                      "conversation where it says so; use the tools for today's rooms.",
                 tools=[free_rooms], context_providers=[memory])
