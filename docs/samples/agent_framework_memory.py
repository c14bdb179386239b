"""A Microsoft Agent Framework agent whose memory is a stored semhist thread.

    pip install 'semhist[agent-framework,local-llm]'
    semhist llm-server --port 8080 &          # or any OpenAI-compatible endpoint
    OPENAI_BASE_URL=http://127.0.0.1:8080/v1 python docs/samples/agent_framework_memory.py
"""

import asyncio
import os

from agent_framework import Agent
from agent_framework.openai import OpenAIChatCompletionClient

from semhist import History
from semhist.integrations.agent_framework import SemhistContextProvider


async def main() -> None:
    history = History()  # the store of SEMHIST_DB / SEMHIST_DATA_DIR
    client = OpenAIChatCompletionClient(model=os.environ.get("SEMHIST_LLM_MODEL", "qwen2.5-coder-1.5b-instruct-q4_k_m"),
                                        base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ.get("OPENAI_API_KEY", "local"))
    agent = Agent(client, instructions="Answer in one short sentence, from the conversation.",
                  context_providers=[SemhistContextProvider(history, budget=2000)])
    session = agent.create_session(session_id="sample-agent-framework")  # the stored thread
    for text in ("My train to Sapporo leaves at 7:40 from platform 3.", "Which platform does my train leave from?"):
        reply = await agent.run(text, session=session, options={"max_tokens": 60})
        print(f"> {text}\n{reply.text}")
    history.close()


asyncio.run(main())
