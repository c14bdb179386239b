"""LLM clients (any OpenAI-compatible endpoint, Azure included) and the packaged local model."""

from .client import LLM_CLIENTS, AzureOpenAIChat, LLMClient, OpenAIChat, make_llm

__all__ = ["LLM_CLIENTS", "AzureOpenAIChat", "LLMClient", "OpenAIChat", "make_llm"]
