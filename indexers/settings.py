"""One settings object: explicit arguments > SEMHIST_* environment variables > defaults.

Only this module reads the environment; stages receive plain values.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError


@dataclass(frozen=True)
class LLMConfig:
    """How to reach an OpenAI-compatible chat endpoint (OpenAI, Azure OpenAI, llama.cpp, vLLM...)."""

    provider: str  # "openai" or "azure"
    model: str
    api_key: str | None = field(default=None, repr=False)
    base_url: str | None = None
    api_version: str | None = None
    timeout: float = 30.0

    @classmethod
    def from_env(cls, env: Mapping[str, str], timeout: float) -> LLMConfig | None:
        """The endpoint the environment describes, or None when it describes none."""
        model = env.get("SEMHIST_LLM_MODEL")
        if env.get("AZURE_OPENAI_ENDPOINT"):
            deployment = env.get("AZURE_OPENAI_DEPLOYMENT") or model
            if not deployment:
                raise ConfigError(
                    "AZURE_OPENAI_ENDPOINT is set but no deployment is named: "
                    "set AZURE_OPENAI_DEPLOYMENT or SEMHIST_LLM_MODEL"
                )
            return cls(
                provider="azure",
                model=deployment,
                api_key=env.get("AZURE_OPENAI_API_KEY"),
                base_url=env["AZURE_OPENAI_ENDPOINT"],
                api_version=env.get("OPENAI_API_VERSION", "2024-10-21"),
                timeout=timeout,
            )
        if env.get("OPENAI_BASE_URL") or env.get("OPENAI_API_KEY"):
            return cls(
                provider="openai",
                model=model or "gpt-4.1-mini",
                # Local OpenAI-compatible servers accept any key; the client insists on one.
                api_key=env.get("OPENAI_API_KEY") or "not-needed",
                base_url=env.get("OPENAI_BASE_URL"),
                timeout=timeout,
            )
        return None


def _default_cache_dir() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("semhist"))


def _default_data_dir() -> Path:
    from platformdirs import user_data_dir

    return Path(user_data_dir("semhist"))


@dataclass(frozen=True)
class Settings:
    """Every tunable of the pipeline, resolved once."""

    embedder: str = "use-m3"
    segmenter: str = "time-gap"
    gap_seconds: float = 300.0
    max_block_tokens: int = 1200
    min_block_messages: int = 3
    topic_percentile: float = 70.0
    timezone: str = "UTC"
    lenient: bool = False
    top_n: int = 3
    min_score: float | None = None
    relative_score: float = 0.5
    recent: int = 6
    hit_window: int = 2
    context_tokens: int = 1500
    fill_budget: bool = True  # blocks: pack retrieval up to the budget, or stop at top_n groups
    window: int = 10
    utterance_k: int = 10
    history_budget: int = 1000
    keyword: str = "auto"  # auto | llm | local
    summary_trigger: float = 0.75
    blocks_memory: str = "none"  # none | structured | summary
    alternate: bool = False
    context_role: str = "system"
    system_prompt: str | None = None
    llm_timeout: float = 30.0
    cache_dir: Path = field(default_factory=_default_cache_dir)
    data_dir: Path = field(default_factory=_default_data_dir)
    db: str | None = None  # sqlite:///path or postgresql://...; default: a SQLite file in data_dir
    pii: str = "off"  # off | on | comma-separated rule names (indexers.pii)
    view_limit: int = 5_000  # stored threads up to this size are searched whole
    ann_threshold: int = 50_000  # vectors per thread above which FAISS goes approximate (HNSW)
    batch_size: int = 256
    llm: LLMConfig | None = None

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults, then SEMHIST_* variables, then the explicit `overrides` (None = not given)."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name == "llm":
                continue
            raw = env.get(f"SEMHIST_{f.name.upper()}")
            if raw is not None and raw != "":
                values[f.name] = _parse(f.name, f.type, raw)
        values.update({k: v for k, v in overrides.items() if v is not None and k != "llm"})
        for name in ("cache_dir", "data_dir"):
            if name in values:
                values[name] = Path(values[name]).expanduser()
        settings = cls(**values)
        llm = overrides.get("llm") or LLMConfig.from_env(env, settings.llm_timeout)
        return replace(settings, llm=llm).validated()

    def validated(self) -> Settings:
        positive = ("gap_seconds", "max_block_tokens", "min_block_messages", "top_n", "window",
                    "utterance_k", "history_budget", "context_tokens", "llm_timeout", "view_limit",
                    "ann_threshold", "batch_size")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if not 0 < self.summary_trigger <= 1:
            raise ConfigError(f"summary_trigger must be within 0..1, got {self.summary_trigger!r}")
        if not 0 <= self.relative_score <= 1:
            raise ConfigError(f"relative_score must be within 0..1, got {self.relative_score!r}")
        for name in ("recent", "hit_window"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        choices = {
            "keyword": ("auto", "llm", "local"),
            "context_role": ("system", "user"),
            "blocks_memory": ("none", "structured", "summary"),
        }
        for name, valid in choices.items():
            if getattr(self, name) not in valid:
                raise ConfigError(f"{name} must be one of {', '.join(valid)}; got {getattr(self, name)!r}")
        return self

    @property
    def db_url(self) -> str:
        return self.db or f"sqlite:///{self.data_dir / 'semhist.sqlite3'}"

    @property
    def index_dir(self) -> Path:
        return self.data_dir / "indexes"


def _parse(name: str, annotation: Any, raw: str) -> Any:
    kind = str(annotation)
    try:
        if kind.startswith("float"):
            return float(raw)
        if kind.startswith("int"):
            return int(raw)
        if kind.startswith("bool"):
            if raw.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(raw)
            return raw.lower() in ("1", "true", "yes")
    except ValueError as exc:
        raise ConfigError(f"SEMHIST_{name.upper()}={raw!r} is not a valid {kind}") from exc
    return raw


_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%?)\s*$")


@dataclass(frozen=True)
class Budget:
    """A hard per-prompt token budget: absolute tokens or a share of the full history."""

    value: float
    relative: bool

    @classmethod
    def parse(cls, text: str) -> Budget:
        match = _BUDGET.match(str(text))
        if not match:
            raise ConfigError(f"budget must look like 2000 or 10%, got {text!r}")
        value, pct = float(match.group(1)), bool(match.group(2))
        if value <= 0 or (pct and value > 100):
            raise ConfigError(f"budget out of range: {text!r}")
        return cls(value / 100 if pct else value, pct)

    def tokens(self, full_history_tokens: int) -> int:
        return int(self.value * full_history_tokens) if self.relative else int(self.value)

    def __str__(self) -> str:
        return f"{self.value * 100:g}%" if self.relative else f"{int(self.value)}"
