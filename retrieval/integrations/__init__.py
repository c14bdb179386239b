"""Drop-in memory for other frameworks, backed by a semhist `History`.

- `retrieval.integrations.langchain` (extra `semhist[langchain]`): a chat message history for
  `RunnableWithMessageHistory` and a pre-model hook for LangGraph agents.
- `retrieval.integrations.llamaindex` (extra `semhist[llamaindex]`): a memory for chat engines
  and agents, and a memory block for `llama_index.core.memory.Memory`.

Each module imports its framework; this package imports neither.
"""
