"""semhist against the memory utilities of LangChain, LlamaIndex and the Agent Framework, in one run.

    .venv/bin/python benchmarks/peers.py        # LoCoMo + JMultiWOZ in full -> benchmarks/peers.{md,json,png}
    .venv/bin/python benchmarks/peers.py --limit 1 --queries 20 --out /tmp/peers    # a quick look

One embedder (semhist's USE-m3 as a LangChain `Embeddings` and a LlamaIndex `BaseEmbedding`), one
token counter (semhist's, given to `trim_messages` and `Memory(tokenizer_fn=)`), one hard budget per
query (10% / 25% of the thread's full history, as `semhist eval --budget`). Each method is fed the
thread a message at a time (write latency), then each request (query latency); scored, as
retrieval/evaluate.py scores, is the set of history messages in the prompt.

- lc-trim: `trim_messages(history + [request], strategy="last", max_tokens=budget, start_on="human")`.
- lc-vector: `InMemoryVectorStore`, a document per message (metadata: index); `similarity_search` with
  k doubled until the hits overflow the budget, cut to the longest rank prefix that fits, in time order.
  lc-vector-named: the same with "Speaker: text" documents (JMultiWOZ has no speakers: the same run).
- li-memory: `Memory.from_defaults(token_limit=budget, token_flush_size=budget // 10)` + a
  `VectorMemoryBlock(priority=2)`, as its docs set it up; `get(input=request)` + the request. Each
  stored batch (text) is matched back to the messages it was flushed from; a prompt over the budget
  by semhist's count (LlamaIndex counts text only) loses its oldest chat turns. li-memory-q1, a
  diagnostic: the block queried with the request alone instead of the last 5 messages.
- af-window / af-budget: the Microsoft Agent Framework's `InMemoryHistoryProvider` with a run's
  `SlidingWindowStrategy` (as many of its groups as fit the budget on the thread's mean), alone or
  inside a `TokenBudgetComposedStrategy(token_budget=budget)` (benchmarks/peers_af.py); scored is
  what its chat client is sent.
- semhist: `blocks` through retrieval.evaluate.evaluate (the figures of `semhist eval`); writes are
  `History.add` per message into a store of its own (the bot's path).
Notes written below NOTES in an existing peers.md are kept when it is written again.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import langchain_core
import llama_index.core
import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, trim_messages
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.memory import Memory, VectorMemoryBlock
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import BasePydanticVectorStore, VectorStoreQuery, VectorStoreQueryResult

from semhist.indexers.embed import PASSAGE, QUERY, cache_key, embed_or_fail, get_embedder
from semhist.indexers.loader import load
from semhist.kernel.model import Thread, api_name, message_text
from semhist.kernel.budget import Budget
from semhist.kernel.settings import Settings
from semhist.kernel.tokens import REPLY_PRIMING, count_message, count_text
from semhist import Engine, History
from semhist.evaluate import evaluate

from common import HERE, add_data, add_out, data_file, pct
# this script's own parts, not scripts: the Agent Framework's memory, the scoring, the report
from peers_af import VERSION as AF_VERSION, run_af
from peers_report import BUDGETS, METHODS, write
from peers_scoring import Tallies, ask_all, budget_tokens, costs, prompt_tokens, request_cost, timed

DATASETS = {"LoCoMo": "locomo.jsonl", "JMultiWOZ": "jmultiwoz_threads.jsonl"}
LI_VARIANTS = {"li-memory": False, "li-memory-q1": True}  # request_only
EMBEDDER = get_embedder("use-m3")


# -- one embedder and one token counter, in each framework's interface ------------------------
def vectors(texts: Sequence[str], kind: str) -> list[list[float]]:
    return embed_or_fail(EMBEDDER, texts, kind).tolist()  # semhist's long-text handling too


class LangChainUSE(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return vectors(texts, PASSAGE)

    def embed_query(self, text: str) -> list[float]:
        return vectors([text], QUERY)[0]


class LlamaUSE(BaseEmbedding):
    model_name: str = EMBEDDER.id

    def _get_query_embedding(self, query: str) -> list[float]:
        return vectors([query], QUERY)[0]

    def _get_text_embedding(self, text: str) -> list[float]:
        return vectors([text], PASSAGE)[0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


class TextVectorStore(BasePydanticVectorStore):
    """Exact cosine over nodes kept with their text: core's SimpleVectorStore keeps no text,
    which VectorMemoryBlock refuses (its docs point to Chroma, Qdrant, ...)."""

    stores_text: bool = True
    _nodes: list = PrivateAttr(default_factory=list)

    @property
    def client(self) -> Any:
        return None

    def add(self, nodes: Sequence[TextNode], **kwargs: Any) -> list[str]:
        self._nodes.extend(nodes)
        return [n.node_id for n in nodes]

    def delete(self, ref_doc_id: str, **kwargs: Any) -> None:
        self._nodes = [n for n in self._nodes if n.ref_doc_id != ref_doc_id]

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        wanted = {(f.key, f.value) for f in (query.filters.filters if query.filters else [])}
        nodes = [n for n in self._nodes if all(n.metadata.get(k) == v for k, v in wanted)]
        sims = np.array([n.embedding for n in nodes] or np.zeros((0, EMBEDDER.dim))) @ np.asarray(query.query_embedding)
        top = np.argsort(-sims, kind="stable")[:query.similarity_top_k]
        return VectorStoreQueryResult(nodes=[nodes[i] for i in top], similarities=[float(sims[i]) for i in top],
                                      ids=[nodes[i].node_id for i in top])


def lc_tokens(messages: list[BaseMessage]) -> int:
    """semhist's count of a prompt (tokens.count_messages), for LangChain messages."""
    return REPLY_PRIMING + sum(count_message({"content": m.content, "name": m.name}) for m in messages)


def li_tokenizer(text: str) -> list[int]:
    return [0] * count_text(text)  # Memory takes len() of what its tokenizer returns


# -- LangChain -----------------------------------------------------------------------------------
def run_trim(thread: Thread, t: Tallies) -> None:
    history: list[BaseMessage] = []
    for m in thread.messages:
        kind = HumanMessage if m.role == "user" else AIMessage
        _, ms = timed(lambda: history.append(kind(content=m.content, name=api_name(m.name) if m.name else None)))
        t.writes["lc-trim", None].append(ms)
    position = {id(msg): i for i, msg in enumerate(history)}

    def read(kept: list[BaseMessage], request: str) -> tuple[set[int], int]:
        idx = {position[id(k)] for k in kept if id(k) in position}
        assert len(idx) == len(kept) - 1, "trim_messages returned messages it was not given"
        return idx, lc_tokens(kept)

    ask_all(thread, t, ["lc-trim"], lambda request, limit: trim_messages(
        history + [HumanMessage(request)], max_tokens=limit, strategy="last", token_counter=lc_tokens,
        start_on="human", include_system=True), read)


def vector_prompt(store: InMemoryVectorStore, request: str, cost: list[int], limit: int) -> list[int]:
    """Top-k with k grown until the hits overflow the budget; the longest rank prefix that
    fits, in chronological order."""
    room, n = limit - request_cost(request), len(cost)
    k = max(4, min(n, 2 * room // max(1, int(np.mean(cost)))))
    while True:
        hits = [d.metadata["index"] for d in store.similarity_search(request, k=k)]
        used = np.cumsum([cost[i] for i in hits])
        kept = hits[:int(np.searchsorted(used, room, side="right"))]
        if len(kept) < len(hits) or k >= n:
            return sorted(kept)
        k = min(n, 2 * k)


def run_vector(thread: Thread, t: Tallies) -> None:
    """lc-vector documents are message texts, lc-vector-named's "Speaker: text" (as semhist embeds
    them); a thread without speakers runs once for both."""
    plain = [message_text(m) for m in thread.messages]
    named = [f"{m.name}: {text}" if m.name else text for m, text in zip(thread.messages, plain)]
    cost = costs(thread)
    runs = [(("lc-vector", "lc-vector-named"), plain)] if named == plain else [
        (("lc-vector",), plain), (("lc-vector-named",), named)]
    for methods, texts in runs:
        store = InMemoryVectorStore(embedding=LangChainUSE())
        for i, text in enumerate(texts):
            _, ms = timed(store.add_documents, [Document(page_content=text, metadata={"index": i})])
            for method in methods:
                t.writes[method, None].append(ms)
        ask_all(thread, t, methods, lambda request, limit: vector_prompt(store, request, cost, limit),
                lambda kept, request: (set(kept), request_cost(request) + sum(cost[i] for i in kept)))


# -- LlamaIndex ----------------------------------------------------------------------------------
class RequestQueryBlock(VectorMemoryBlock):
    """VectorMemoryBlock as shipped, unless `request_only` (li-memory-q1): then it is queried
    with the request alone. retrieval_context_window=1 cannot say that: with a window of 1, or
    one longer than the history, the block queries with every message it is given."""

    request_only: bool = False

    async def _aget(self, messages: list[ChatMessage] | None = None, **kwargs: Any) -> str:
        return await super()._aget(messages[-1:] if self.request_only and messages else messages, **kwargs)


def li_memory(limit: int) -> Memory:
    block = RequestQueryBlock(name="vector_memory", vector_store=TextVectorStore(), priority=2, embed_model=LlamaUSE())
    return Memory.from_defaults(token_limit=limit, token_flush_size=max(1, limit // 10), chat_history_token_ratio=0.7,
                                memory_blocks=[block], tokenizer_fn=li_tokenizer, insert_method="system")


def node_runs(store: TextVectorStore, thread: Thread) -> list[tuple[str, list[int]]]:
    """Each node's text and messages: VectorMemoryBlock stores a flushed batch as one node, a
    message as <message role='ROLE'>TEXT</message>, newline-joined (empty texts left out)."""
    out, p = [], 0
    for node in store._nodes:
        text, parts, run = node.get_content(), [], []
        while "\n".join(parts) != text:
            m = thread.messages[p]
            run.append(p)
            if m.content:
                parts.append(f"<message role='{m.role}'>{m.content}</message>")
                if not text.startswith("\n".join(parts)):
                    raise RuntimeError(f"a stored batch does not match the messages from {run[0]}")
            p += 1
        out.append((text, run))
    return out


def li_prompt(memory: Memory, request: str, limit: int) -> tuple[list[dict[str, str]], int]:
    """get(input=request) + the request; over the budget by semhist's count, the oldest chat
    turns go (then the memory message)."""
    got = memory.get(input=request)
    prompt = [{"role": str(getattr(m.role, "value", m.role)), "content": m.content or ""} for m in got]
    prompt.append({"role": "user", "content": request})
    over = max(0, prompt_tokens(prompt) - limit)
    while prompt_tokens(prompt) > limit and len(prompt) > 1:
        first = 1 if prompt[0]["role"] == "system" and len(prompt) > 2 else 0
        del prompt[first]
    return prompt, over


def li_read(answer: tuple[list[dict[str, str]], int], runs, thread: Thread, extra: dict[str, int]):
    """The chat-history tail, and the messages of the batches the memory message holds."""
    prompt, over = answer
    n = len(thread.messages)
    system = prompt[0]["content"] if prompt[0]["role"] == "system" else ""
    found = [run for text, run in runs if text in system]
    chat = [m for m in prompt[:-1] if m["role"] != "system"]
    tail = list(range(n - len(chat), n))
    assert all(thread.messages[i].content == c["content"] for i, c in zip(tail, chat)), "chat history mismatch"
    matched = sum(1 for run in found for i in run if thread.messages[i].content)
    assert system.count("<message role=") == matched, "a retrieved batch was not matched back to its messages"
    extra["over_budget_raw"] += over > 0
    extra["tokens_over_raw"] += over
    extra["with_retrieved_batches"] += bool(found)
    return set(tail) | {i for run in found for i in run}, prompt_tokens(prompt)


def run_llama(thread: Thread, t: Tallies) -> None:
    for b in BUDGETS:
        memory = li_memory(budget_tokens(b, sum(costs(thread)), ""))
        for m in thread.messages:
            _, ms = timed(memory.put, ChatMessage(role=m.role, content=m.content))
            t.writes["li-memory", b].append(ms)
        runs = node_runs(memory.memory_blocks[0].vector_store, thread)
        for method, request_only in LI_VARIANTS.items():
            memory.memory_blocks[0].request_only = request_only
            t.extra[method, b]["batches_stored"] += len(runs)
            ask_all(thread, t, [method], lambda request, limit: li_prompt(memory, request, limit),
                    lambda answer, request: li_read(answer, runs, thread, t.extra[method, b]), [b])


# -- semhist -------------------------------------------------------------------------------------
def semhist_writes(threads: Sequence[Thread], settings: Settings, t: Tallies) -> None:
    history = History(settings, llm=None)
    for n, thread in enumerate(threads):
        for m in thread.messages:
            _, ms = timed(history.add, f"peers-{n}", m.role, m.content, name=m.name, timestamp=m.timestamp)
            t.writes["semhist", None].append(ms)
    history.close()
    history.store.close()


def semhist_eval(threads: Sequence[Thread], engine: Engine, dataset: str) -> dict[str, dict]:
    out = {}
    for b in BUDGETS:  # each budget embeds its queries afresh, as the peers do (the engine caches them)
        embedder, asker = engine.parts.embedder, engine.parts.asker
        embedder.cache.delete_many([cache_key(embedder.id, QUERY, asker.keywords(q.text, th.last_time).query)
                                    for th in threads for q in th.queries])
        out[b] = evaluate(engine, threads, ["blocks"], budget=Budget.parse(b), dataset=dataset)["strategies"]["blocks"]
    return out


def run_dataset(path: Path, limit: int | None, n_queries: int | None, workdir: Path) -> dict:
    threads = load(path).threads[:limit] if limit else load(path).threads
    threads = [replace(th, queries=tuple([q for q in th.queries if q.has_evidence][:n_queries])) for th in threads]
    t, times = Tallies(), {}
    for name, fn in (("lc-trim", run_trim), ("lc-vector", run_vector), ("li-memory", run_llama), ("af", run_af)):
        start = time.perf_counter()
        for thread in threads:
            fn(thread, t)
        times[name] = round(time.perf_counter() - start, 1)
        print(f"{path.name}: {name} {times[name]} s", flush=True)
    start, settings = time.perf_counter(), Settings.load(cache_dir=workdir / "cache", data_dir=workdir / "data")
    semhist_writes(threads, replace(settings, db=f"sqlite:///{workdir / path.stem}.sqlite3"), t)
    engine = Engine(settings, llm=None)
    ours = semhist_eval(threads, engine, path.name)
    engine.close()
    times["semhist"] = round(time.perf_counter() - start, 1)
    print(f"{path.name}: semhist {times['semhist']} s", flush=True)
    results: dict[str, dict] = defaultdict(dict)
    for m in METHODS:
        for b in BUDGETS:
            row = {k: v for k, v in (ours[b] if m == "semhist" else t.q[m, b].summary()).items() if k != "llm_calls"}
            writes = t.writes.get((m.removesuffix("-q1"), b)) or t.writes[m, None]  # -q1: the same memory
            row.update(query_p50_ms=row.pop("p50_ms"), query_p95_ms=row.pop("p95_ms"),
                       write_p50_ms=pct(writes, 50, 3), write_p95_ms=pct(writes, 95, 3), **t.extra[m, b])
            results[m][b] = row
    return {"file": path.name, "threads": len(threads), "messages": sum(len(th.messages) for th in threads),
            "queries": sum(len(th.queries) for th in threads), "wall_s": times, "methods": dict(results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", action="append", choices=sorted(DATASETS), help="default: both")
    parser.add_argument("--limit", type=int, help="only the first N threads of each dataset")
    parser.add_argument("--queries", type=int, help="only the first N queries with evidence of each thread")
    add_out(parser, HERE, "--out-dir")
    add_data(parser)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="semhist-peers-"))  # fresh stores and embedding cache
    start = time.perf_counter()
    try:
        datasets = {name: run_dataset(data_file(DATASETS[name]), args.limit, args.queries, workdir)
                    for name in args.dataset or DATASETS}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    subset = ", ".join(f"first {n} {what}" for n, what in ((args.limit, "threads"), (args.queries, "queries a thread"))
                       if n) or "full sets"
    versions = {"langchain_core": langchain_core.__version__, "llama_index": llama_index.core.__version__,
                "agent_framework": AF_VERSION}
    command = " ".join([".venv/bin/python", "benchmarks/peers.py", *sys.argv[1:]])
    results = {"settings": {"command": command, "wall_s": round(time.perf_counter() - start, 1), "cores": os.cpu_count(),
                            "subset": subset, "budgets": list(BUDGETS), "embedder": EMBEDDER.id, "versions": versions},
               "datasets": datasets}
    write(results, args.out, command, how=__doc__.split("\n\n", 3)[3].rsplit("\nNotes", 1)[0])
    print(f"wrote {args.out}/peers.md, peers.json, peers.png in {results['settings']['wall_s']} s")


if __name__ == "__main__":
    main()
