"""An OpenAI Agents SDK agent whose session is a stored semhist thread.

    pip install 'semhist[openai-agents,local-llm]'
    semhist llm-server --port 8080 &          # or any OpenAI-compatible endpoint
    OPENAI_BASE_URL=http://127.0.0.1:8080/v1 python docs/samples/openai_agents_session.py
"""

import asyncio
import os

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, RunConfig, Runner, set_tracing_disabled
from openai import AsyncOpenAI

from semhist import History
from semhist.integrations.openai_agents import SemhistSession

set_tracing_disabled(True)  # the SDK's traces go to OpenAI otherwise


async def main() -> None:
    history = History()
    session = SemhistSession(history, "sample-openai-agents", budget=2000)
    model = OpenAIChatCompletionsModel(model=os.environ.get("SEMHIST_LLM_MODEL", "qwen2.5-coder-1.5b-instruct-q4_k_m"),
                                       openai_client=AsyncOpenAI(base_url=os.environ["OPENAI_BASE_URL"],
                                                                 api_key=os.environ.get("OPENAI_API_KEY", "local")))
    agent = Agent(name="assistant", instructions="Answer in one short sentence, from the conversation.",
                  model=model, model_settings=ModelSettings(max_tokens=60))
    for text in ("My train to Sapporo leaves at 7:40 from platform 3.", "Which platform does my train leave from?"):
        # semhist's prompt for this input replaces the thread: the SDK asks for it here
        result = await Runner.run(agent, text, session=session,
                                  run_config=RunConfig(session_input_callback=session.prompt))
        print(f"> {text}\n{result.final_output}")
    history.close()


asyncio.run(main())
