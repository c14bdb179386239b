"""LLM clients behind one small protocol: any OpenAI-compatible chat endpoint, Azure included."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from semhist.kernel.errors import BackendError, ConfigError
from semhist.kernel.settings import LLMConfig


class LLMClient(Protocol):
    """Sends a chat `messages` list, returns the reply text. `model` names what answered;
    `timeout` (seconds) shortens this call's wait below the configured one."""

    model: str

    def chat(self, messages: Sequence[dict[str, Any]], *, json_mode: bool = False,
             json_schema: dict[str, Any] | None = None, max_tokens: int = 256,
             timeout: float | None = None) -> str: ...


class OpenAIChat:
    """The official `openai` client, for OpenAI itself or any compatible server."""

    def __init__(self, config: LLMConfig):
        import openai

        self.model = config.model
        self._client = self._make(openai, config)

    @staticmethod
    def _make(openai: Any, config: LLMConfig) -> Any:
        # One attempt: a caller that falls back locally wants a fast failure, not retries.
        return openai.OpenAI(api_key=config.api_key, base_url=config.base_url,
                             timeout=config.timeout, max_retries=0)

    def chat(self, messages: Sequence[dict[str, Any]], *, json_mode: bool = False,
             json_schema: dict[str, Any] | None = None, max_tokens: int = 256,
             timeout: float | None = None) -> str:
        import openai

        kwargs: dict[str, Any] = {"model": self.model, "messages": list(messages),
                                  "temperature": 0, "max_tokens": max_tokens}
        if timeout is not None:
            kwargs["timeout"] = timeout
        if json_schema is not None:
            kwargs["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "answer", "schema": json_schema}}
        elif json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        try:
            reply = self._client.chat.completions.create(**kwargs)
        # A misbehaving endpoint surfaces as a body that is not JSON (ValueError) or not UTF-8
        # (UnicodeDecodeError, a ValueError too) from inside the client.
        except (openai.OpenAIError, ValueError) as exc:
            raise BackendError(f"LLM call to {self.model} failed: {type(exc).__name__}: {exc}") from exc
        return _reply_text(reply, self.model)


    def stream(self, messages: Sequence[dict[str, Any]], *, max_tokens: int = 256,
               timeout: float | None = None) -> Iterator[str]:
        """The reply's text as the model writes it (pieces in order)."""
        import openai

        kwargs: dict[str, Any] = {"model": self.model, "messages": list(messages), "temperature": 0,
                                  "max_tokens": max_tokens, "stream": True}
        if timeout is not None:
            kwargs["timeout"] = timeout
        try:
            for chunk in self._client.chat.completions.create(**kwargs):
                choices = getattr(chunk, "choices", None) or []
                delta = getattr(choices[0], "delta", None) if choices else None
                if delta is not None and isinstance(getattr(delta, "content", None), str) and delta.content:
                    yield delta.content
        except (openai.OpenAIError, ValueError) as exc:
            raise BackendError(f"LLM call to {self.model} failed: {type(exc).__name__}: {exc}") from exc


def _reply_text(reply: Any, model: str) -> str:
    """The text of a chat completion; anything else (an HTML page the client hands back as a
    string, a 200 without choices) is a BackendError saying what came back."""
    choices = getattr(reply, "choices", None)
    if not isinstance(choices, list):
        shown = reply if isinstance(reply, str) else type(reply).__name__
        raise BackendError(f"LLM {model}: the endpoint did not answer with a chat completion: {str(shown)[:120]!r}")
    if not choices:
        raise BackendError(f"LLM {model} returned no choices")
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    if content is not None and not isinstance(content, str):
        raise BackendError(f"LLM {model}: the reply's content is not text ({type(content).__name__})")
    return content or ""


class AzureOpenAIChat(OpenAIChat):
    """Azure OpenAI: endpoint, key, API version and deployment name from the environment."""

    @staticmethod
    def _make(openai: Any, config: LLMConfig) -> Any:
        return openai.AzureOpenAI(azure_endpoint=config.base_url, api_key=config.api_key,
                                  api_version=config.api_version, timeout=config.timeout,
                                  max_retries=0)


LLM_CLIENTS: dict[str, Callable[[LLMConfig], LLMClient]] = {
    "openai": OpenAIChat,
    "azure": AzureOpenAIChat,
}


def make_llm(config: LLMConfig | None) -> LLMClient | None:
    """The client for `config`, or None when no LLM is configured."""
    if config is None:
        return None
    try:
        factory = LLM_CLIENTS[config.provider]
    except KeyError:
        raise ConfigError(
            f"unknown LLM provider {config.provider!r}; valid: {', '.join(sorted(LLM_CLIENTS))}"
        ) from None
    return factory(config)
