"""The official OpenAI client on the Responses API, with semhist as drop-in memory in between.

    pip install 'semhist[service,local-llm]'
    semhist llm-server --port 8080 &                                  # or any OpenAI-compatible upstream
    semhist serve --upstream http://127.0.0.1:8080/v1 --port 8000 &
    SEMHIST_URL=http://127.0.0.1:8000/v1 python docs/samples/responses_api.py
"""

import os

from openai import OpenAI

# the thread is named by a header; semhist stores each turn and sends its prompt upstream
client = OpenAI(base_url=os.environ.get("SEMHIST_URL", "http://127.0.0.1:8000/v1"), api_key="unused",
                default_headers={"X-Semhist-Thread": "sample-responses"})
model = os.environ.get("SEMHIST_LLM_MODEL", "qwen2.5-coder-1.5b-instruct-q4_k_m")
for text in ("My train to Sapporo leaves at 7:40 from platform 3.", "Which platform does my train leave from?"):
    reply = client.responses.create(model=model, input=text, max_output_tokens=60,
                                    instructions="Answer in one short sentence, from the conversation.")
    print(f"> {text}\n{reply.output_text}")
