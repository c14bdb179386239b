"""One settings object: explicit arguments > SEMHIST_* environment variables > defaults.

Only this module reads the environment; stages receive plain values. Each field carries
its help text and the group of commands that use it, so the CLI derives its flags, their
help and their defaults from here and cannot drift from the code.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .budget import Budget
from .errors import ConfigError
from .model import MAX_MESSAGE_CHARS
from .validate import text_problem

# Option groups: each command shows the groups it uses (retrieval/cli/options.py).
EMBED, SEGMENT, SEARCH, KEYWORD, ANSWER, MEMORY, INPUT, STORE, WRITE, SERVE, CACHE, SERVICE = (
    "embedding", "segmentation", "selection", "keyword", "answer", "memory", "input", "store", "writing",
    "serving", "cache", "service")


# Who writes a message, by kind: the operator (the library, the CLI, SEMHIST_API_TOKEN), a scoped
# service token, an MCP client, the proxy (a system message after a request's first turn).
WRITER_KINDS = ("operator", "token", "mcp", "proxy")


def option(default: Any = MISSING, *, help: str, group: str, flag: str | None = None,
           choices: tuple[str, ...] | None = None, factory: Any = None, shown: str | None = None) -> Any:
    """A settings field with what the CLI needs to offer it (`shown`: how help names the default)."""
    meta = {"help": help, "group": group, "flag": flag, "choices": choices, "shown": shown}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


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

    # -- embedding and segmentation (what an index is built with; recorded in its manifest)
    embedder: str = option("use-m3", group=EMBED, help="use-m3, e5-small, or st:<model name or path>")
    segmenter: str = option("time-gap", group=SEGMENT, choices=("time-gap", "time+topic", "time+tiling", "time+learned"),
                            help="how messages are grouped into blocks")
    gap_seconds: float = option(300.0, group=SEGMENT, flag="--gap", help="seconds of silence that start a block")
    max_block_tokens: int = option(1200, group=SEGMENT, help="a block that would grow past this is cut where "
                                                             "the topic drifts most")
    min_block_messages: int = option(3, group=SEGMENT, help="fewest messages on either side of a cut")
    topic_percentile: float = option(70.0, group=SEGMENT, help="topic cuts where drift peaks above this "
                                                               "percentile of the thread's own drift")
    # 800: chosen on the tune halves of benchmarks/seg_recall.md, the floor with no loss where
    # pauses cut the thread (0 and 400 lost up to .044 there) and a lift where none do
    topic_min_tokens: int = option(800, group=SEGMENT, help="time+learned: a topic shift starts a block only once "
                                                            "the block holds this many tokens (0: at every shift)")
    segmenter_model: str | None = option(None, group=SEGMENT, shown="the shipped one",
                                         help="weights of the time+learned segmenter (a JSON file "
                                              "benchmarks/seg_train.py writes)")
    # -- selection
    top_n: int = option(3, group=SEARCH, help="retrieved groups when no budget is given")
    min_score: float | None = option(None, group=SEARCH, help="minimum block cosine (0.3 = the worked example)")
    relative_score: float = option(0.5, group=SEARCH, help="without a budget, leave out topic blocks under this "
                                                           "share of the best block's cosine")
    recent: int = option(6, group=SEARCH, help="recent messages kept verbatim")
    # 0 since the learned ranker: a hit's neighbours rank by their own scores, which read the
    # hit beside them (LoCoMo's tune half, benchmarks/horizon_window2.md against horizon.md)
    hit_window: int = option(0, group=SEARCH, help="neighbours kept on each side of a fact hit (its "
                                                   "reply comes with a question either way)")
    context_tokens: int = option(1500, group=SEARCH, help="retrieval's share when no budget is given")
    fill_budget: bool = option(True, group=SEARCH, help="blocks packs retrieval up to the budget "
                                                        "(else at most --top-n groups)")
    window: int = option(10, group=SEARCH, help="messages kept by the window strategy")
    utterance_k: int = option(10, group=SEARCH, help="messages retrieved by the utterances strategy")
    history_budget: int = option(1000, group=SEARCH, help="token-budget/summary/structured budget when "
                                                          "none is given")
    keep_tool_results: int = option(3, group=SEARCH, help="tool results shown whole in a prompt's turns; older "
                                    "ones become a short placeholder (still searched and retrieved); "
                                    "-1 keeps them all")
    tool_clear_step: int = option(5, group=SEARCH, help="old tool results are cleared this many at a time, so "
                                                        "the prompt's start (a provider's cache) changes rarely")
    protected_tools: str = option("", group=SEARCH, help="comma-separated tool names whose results are never "
                                                         "cleared", shown="none")
    layout: str = option("auto", group=SEARCH, choices=("auto", "head", "cache"),
                         help="head: retrieved history right after the system prompt; cache: what stays "
                              "the same from turn to turn first (a provider's prompt cache bills it at "
                              "about 0.1x), recent turns cut back in steps, retrieved history just before "
                              "the request; auto: cache for a billed budget (1000b), else head")
    price_model: str = option("openai", group=SEARCH, choices=("openai", "anthropic", "none"),
                              help="how the provider bills cached input, for billed budgets (1000b) and the "
                                   "cost figures: openai (0.1x from 1,024 tokens), anthropic (0.1x, writes 1.25x)")
    recent_step: int = option(8, group=SEARCH, help="cache layout: the recent turns are cut back this many "
                                                    "exchanges at a time, so the prompt's start changes rarely")
    alternate: bool = option(False, group=SEARCH, help="merge same-role turns for APIs that require "
                                                       "user/assistant alternation")
    # "user", not "system": the context quotes what anyone once typed, and a system message
    # speaks with the operator's authority (docs/guides/security.md)
    ranker: str = option("learned", group=SEARCH, choices=("learned", "fused"),
                         help="blocks: what orders the candidates: learned (a model over the search's "
                              "signals, fitted on labelled conversations) or fused (BM25 and dense ranks)")
    ranker_model: str | None = option(None, group=SEARCH, shown="the shipped one",
                                      help="the learned ranker's weights: a JSON file fitted by "
                                           "benchmarks/ltr_train.py on your own labelled threads")
    mentions_first: bool = option(True, group=SEARCH, help="blocks, a topic request under a budget: the stretch "
                                                           "around each block's mention of its thing before any "
                                                           "block whole")
    mentions_run_on: bool = option(True, group=SEARCH, help="blocks, with mentions_first: then the talk "
                                                            "after each block's last mention, on into the "
                                                            "next block")
    list_stretches: bool = option(True, group=SEARCH, help="blocks, a topic request under a budget: name each "
                                                           "stretch about it that does not fit by one dated line")
    context_role: str = option("user", group=SEARCH, choices=("user", "system"),
                               help="role of the retrieved-context and memory messages (system gives "
                                    "stored text the operator's authority)")
    system_prompt: str | None = option(None, group=SEARCH, help="system prompt put first in every prompt",
                                       shown="none")
    # -- the request
    keyword: str = option("auto", group=KEYWORD, choices=("auto", "llm", "local"),
                          help="keyword extractor: the LLM when configured, else local")
    # The packaged 1.5B model on a busy 2-core machine reads ~36 prompt tokens/s: 5-15 s for a
    # request analysis, 70 s before the first word of an answer to a 2,500-token prompt
    # (LoCoMo at 10%; benchmarks/answers.md). 30 s lost most answers there.
    llm_timeout: float = option(180.0, group=KEYWORD, help="seconds to wait for the LLM (any call)")
    # -- answers (ask --answer, eval --answer)
    answer_tokens: int = option(512, group=ANSWER, help="longest answer the model may write, in tokens")
    judge_model: str | None = option(None, group=ANSWER, help="eval --answer: the model that grades answers "
                                     "CORRECT/WRONG ('none': no judge)", shown="the answer model (SEMHIST_LLM_MODEL)")
    judge_base_url: str | None = option(None, group=ANSWER, help="eval --answer: the judge's OpenAI-compatible "
                                        "endpoint (key: SEMHIST_JUDGE_API_KEY)", shown="the answer endpoint")
    # -- memory (summary, structured)
    summary_trigger: float = option(0.75, group=MEMORY, help="compact when the prompt passes this share "
                                                             "of its budget")
    blocks_memory: str = option("none", group=MEMORY, choices=("none", "structured", "summary"),
                                help="blocks also carries the user statements (structured) or the summary "
                                     "and them")
    compaction_calls: int = option(16, group=MEMORY, help="most LLM calls one ask spends on compaction; a "
                                                          "backlog is caught up over later asks")
    compaction_lookback: int = option(0, group=MEMORY, help="when compaction starts on a thread, read at most "
                                                            "this many older messages (0: all of them)")
    # -- reading files
    timezone: str = option("UTC", group=INPUT, help="zone for timestamps without one")
    lenient: bool = option(False, group=INPUT, help="skip and report bad messages instead of stopping")
    max_message_chars: int = option(MAX_MESSAGE_CHARS, group=INPUT, help="longest message or request text "
                                    "accepted, in characters (longer ones are refused; the service answers 413)")
    # -- stored threads
    db: str | None = option(None, group=STORE, help="sqlite:///path.db or postgresql://user@host/db",
                            shown="semhist.sqlite3 in the data directory")
    data_dir: Path = option(group=STORE, factory=_default_data_dir, shown="the user data directory",
                            help="where the default database and FAISS files live")
    pii: str = option("off", group=WRITE, help="mask e-mails, phones, card numbers, My Numbers and postal "
                                               "addresses before storing (kept with the thread): on, off, or "
                                               "rule names")
    operator_writers: str = option("operator", group=WRITE,
                                   help="who may store system/developer messages as operator instructions: "
                                        "operator (the library, the CLI, SEMHIST_API_TOKEN); add token, mcp, "
                                        "proxy to trust those writers too (comma-separated). From any other "
                                        "writer they are stored as quoted history")
    log_prompts: bool = option(False, group=STORE, help="keep each logged ask's prompt messages (masked like "
                                                        "the thread) for the inspector; any forget of the "
                                                        "thread clears them")
    view_limit: int = option(10_000, group=SERVE, help="stored threads up to this many messages are "
                                                      "searched whole")
    ann_threshold: int = option(50_000, group=SERVE, help="vectors per thread above which FAISS goes "
                                                          "approximate (HNSW)")
    batch_size: int = option(256, group=WRITE, help="messages per ingest transaction")
    cache_threads: int = option(256, group=SERVE, help="threads whose query-time state stays in memory")
    cache_mb: int = option(1024, group=SERVE, help="megabytes of query-time state kept in memory")
    # -- caches
    cache_dir: Path = option(group=CACHE, factory=_default_cache_dir, shown="the user cache directory",
                             help="where embeddings and the local model are cached")
    # -- the HTTP service (semhist serve)
    max_body_kb: int = option(4096, group=SERVICE, help="largest request body the service accepts (413 above)")
    max_batch: int = option(256, group=SERVICE, help="most messages one POST may add (413 above)")
    upstream: str | None = option(None, group=SERVICE, help="OpenAI-compatible base URL that POST "
                                  "/v1/chat/completions forwards to (e.g. http://127.0.0.1:8080/v1)",
                                  shown="the configured LLM endpoint (OPENAI_BASE_URL, AZURE_OPENAI_ENDPOINT)")
    cache_key: str = option("auto", group=SERVICE, choices=("auto", "on", "off"),
                            help="the proxy sends prompt_cache_key (a digest of the thread) unless the request "
                                 "has one, so a thread's prompts meet the provider's same cache; auto: not to "
                                 "Azure, whose API refuses fields it does not know")
    # The service closes what it opens (docs/guides/security.md): a request's headers and body
    # each have a deadline, an idle connection is closed, connections per worker are capped.
    header_timeout: float = option(10.0, group=SERVICE, help="seconds a client has to send a request's "
                                                             "headers (408 and closed after)")
    body_timeout: float = option(30.0, group=SERVICE, help="seconds a client has to send a request's body "
                                                           "once its headers are in")
    # longer than a bot's pause between turns and a load balancer's idle timeout (60 s): closing
    # sooner races with the client reusing the connection
    keep_alive: float = option(75.0, group=SERVICE, help="seconds an idle kept-alive connection stays open")
    max_connections: int = option(1000, group=SERVICE, help="connections per worker that have sent a request; "
                                                            "beyond, new requests are answered 503 (JSON). "
                                                            "Connections still sending their first headers "
                                                            "have a bucket of the same size of their own: "
                                                            "when full, a newcomer closes the oldest of the "
                                                            "client holding the most")
    max_pending_per_client: int = option(32, group=SERVICE, help="connections one client address (an IPv6 "
                                                                 "/64) may hold open before its first request's "
                                                                 "headers are in; a newer one closes its oldest "
                                                                 "(503)")
    # 64 KB: nginx's default for a request head is 8 KB per line and 32 KB in all; 64 leaves room
    # for a long bearer token and proxy headers, and bounds what a streamed head holds
    max_header_kb: int = option(64, group=SERVICE, help="largest request line and headers (and a chunked "
                                                        "body's framing) in KB, refused as they arrive: 414 "
                                                        "for a URL, 431 for headers, and closed")
    upstream_timeout: float = option(600.0, group=SERVICE, help="seconds to wait for the upstream's answer "
                                                                "(a local model on a busy CPU takes minutes)")
    tokens_file: Path | None = option(None, group=SERVICE, shown="none",
                                      help="a JSON file of scoped bearer tokens, each limited to thread-id "
                                           "prefixes (docs/guides/security.md)")
    # Only from the environment (SEMHIST_API_TOKEN): a flag would show the secret in `ps`.
    api_token: str | None = field(default=None, repr=False)
    tokens: str | None = field(default=None, repr=False)  # SEMHIST_TOKENS: the tokens file's JSON
    # SEMHIST_SECRET: the key of the thread ids the proxy makes from an OpenAI `user`; without
    # it, a random one kept in the store (so every replica on the store makes the same ids)
    secret: str | None = field(default=None, repr=False)
    # SEMHIST_UPSTREAM_API_KEY: the key for --upstream (the OpenAI/Azure keys are only ever sent
    # to the endpoints their own variables name)
    upstream_api_key: str | None = field(default=None, repr=False)
    judge_api_key: str | None = field(default=None, repr=False)  # SEMHIST_JUDGE_API_KEY
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
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        values.update({k: v for k, v in overrides.items() if v is not None and k != "llm"})
        for name in ("cache_dir", "data_dir", "tokens_file"):
            if values.get(name) is not None:
                values[name] = Path(values[name]).expanduser()
        settings = cls(**values)
        llm = overrides.get("llm") or LLMConfig.from_env(env, settings.llm_timeout)
        return replace(settings, llm=llm).validated()

    def validated(self) -> Settings:
        positive = ("gap_seconds", "max_block_tokens", "min_block_messages", "top_n", "window",
                    "utterance_k", "history_budget", "context_tokens", "llm_timeout", "view_limit",
                    "ann_threshold", "batch_size", "cache_threads", "cache_mb", "max_body_kb", "max_batch",
                    "max_message_chars", "upstream_timeout", "answer_tokens", "tool_clear_step", "recent_step",
                    "header_timeout", "body_timeout", "keep_alive", "max_connections", "max_pending_per_client",
                    "max_header_kb")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if not 0 < self.summary_trigger <= 1:
            raise ConfigError(f"summary_trigger must be within 0..1, got {self.summary_trigger!r}")
        if not 0 <= self.relative_score <= 1:
            raise ConfigError(f"relative_score must be within 0..1, got {self.relative_score!r}")
        for name in ("recent", "hit_window", "compaction_calls", "compaction_lookback"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if self.keep_tool_results < -1:
            raise ConfigError(f"keep_tool_results must be >= 0, or -1 to keep them all; got {self.keep_tool_results!r}")
        problem = text_problem(self.system_prompt) if self.system_prompt else None
        if problem:
            raise ConfigError(f"system_prompt must be UTF-8 text without NUL: it is {problem}")
        for f in fields(self):
            valid = f.metadata.get("choices")
            if valid and getattr(self, f.name) not in valid:
                raise ConfigError(f"{f.name} must be one of {', '.join(valid)}; got {getattr(self, f.name)!r}")
        unknown = set(self.trusted_writers) - set(WRITER_KINDS)
        if unknown or "operator" not in self.trusted_writers:
            raise ConfigError(f"operator_writers must name operator and any of {', '.join(WRITER_KINDS[1:])}; "
                              f"got {self.operator_writers!r}")
        return self

    @property
    def trusted_writers(self) -> frozenset[str]:
        """The kinds of writer whose system/developer messages are the operator's (`operator_writers`)."""
        return frozenset(w.strip() for w in self.operator_writers.split(",") if w.strip())

    def layout_for(self, budget: Budget | None) -> str:
        """The layout a request is built in: `auto` is the cache layout for a billed budget
        (what it is for), the head layout otherwise (docs/guides/cost.md: at token budgets
        `blocks` bills the same in both, and the head layout retrieves more for a new topic)."""
        if self.layout == "auto":
            return "cache" if budget is not None and budget.billed else "head"
        return self.layout

    @property
    def db_url(self) -> str:
        return self.db or f"sqlite:///{self.data_dir / 'semhist.sqlite3'}"

    @property
    def index_dir(self) -> Path:
        return self.data_dir / "indexes"

    @property
    def segment_params(self) -> dict[str, Any]:
        """What the segmenter is built from; recorded in every thread's manifest."""
        return {"gap_seconds": self.gap_seconds, "max_block_tokens": self.max_block_tokens,
                "min_block_messages": self.min_block_messages, "percentile": self.topic_percentile,
                **({"model": self.segmenter_model, "min_tokens": self.topic_min_tokens}
                   if self.segmenter == "time+learned" else {})}


def settings_fields(groups: set[str] | None = None) -> list[Field]:
    """The fields offered to users, in declaration order (optionally only some groups)."""
    return [f for f in fields(Settings) if f.metadata.get("group") and (groups is None or f.metadata["group"] in groups)]


def _parse(name: str, annotation: Any, raw: str) -> Any:
    kind = str(annotation)
    try:
        if kind.startswith("float"):
            return float(raw)
        if kind.startswith("int"):
            return int(raw)
        if kind.startswith("bool"):
            if raw.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(raw)
            return raw.lower() in ("1", "true", "yes", "on")
    except ValueError as exc:
        raise ConfigError(f"SEMHIST_{name.upper()}={raw!r} is not a valid {kind}") from exc
    return raw


def redact(url: str) -> str:
    """The URL without its password, for error messages and logs."""
    from urllib.parse import urlparse

    parsed = urlparse(url)
    if parsed.password:
        return url.replace(f":{parsed.password}@", ":***@")
    return url
