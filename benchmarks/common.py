"""What the benchmark scripts share: where things are, the data they build from the public
sets, and how they write their results.

Every script runs as `python benchmarks/NAME.py` (its folder is then on the import path) and
imports what it shares from here, never from another script. Every script that writes results
takes `--out DIR` (default: this folder, where the published results live), so a trial run
elsewhere never touches them; tests/test_benchmarks_smoke.py runs each one on a tiny input.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import hashlib
import json
import lzma
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from semhist.kernel.model import Thread

# -- paths ---------------------------------------------------------------------------------------
HERE = Path(__file__).resolve().parent  # benchmarks/: the scripts and their published results
ROOT = HERE.parent  # the repository
SHARED_DATA = ROOT.parent / "shared" / "data"  # the public sets beside a checkout (read through data_file)
SHIPPED_DATA = ROOT / "data" / "benchmarks"  # the sets the repository carries itself, compressed
SAMPLES = ROOT / "data" / "samples"
PROBES = ROOT / "data" / "probes"
HOME_CACHE = Path.home() / ".cache" / "semhist"  # the scripts' --cache-dir where they name one
LOCOMO_CATEGORIES = ("locomo_cat1", "locomo_cat2", "locomo_cat3", "locomo_cat4")


# -- arguments -----------------------------------------------------------------------------------
def add_out(parser: argparse.ArgumentParser, default: Path = HERE, *aliases: str) -> None:
    """`--out DIR`: the folder the script writes its result files to."""
    parser.add_argument("--out", *aliases, dest="out", type=Path, default=default, metavar="DIR",
                        help="folder the result files are written to (default: %(default)s)")


def add_subset(parser: argparse.ArgumentParser) -> None:
    """`--limit N` threads and `--queries N` queries a thread: a quick run on a part of the sets."""
    parser.add_argument("--limit", type=int, help="only the first N threads of each dataset")
    parser.add_argument("--queries", type=int, help="only the first N queries of each thread")


def subset(threads: Sequence[Thread], limit: int | None = None, queries: int | None = None) -> list[Thread]:
    """The first `limit` threads, each with its first `queries` queries (None: all of them)."""
    threads = list(threads[:limit] if limit else threads)
    return [replace(t, queries=t.queries[:queries]) for t in threads] if queries else threads


# -- the benchmark data --------------------------------------------------------------------------
# Where each set comes from, said when it is nowhere here (docs/guides/evaluation.md has the format)
ORIGINS = {
    "locomo.jsonl": "LoCoMo is github.com/snap-research/locomo's data/locomo10.zip (CC BY-NC 4.0, so not "
                    "shipped here), converted to the benchmark format",
    "tiage.jsonl": "TIAGE is github.com/HuiyuanXie/tiage (MIT), converted to the benchmark format",
    "jmultiwoz_threads.jsonl": "the repository's copy, data/benchmarks/jmultiwoz_threads.jsonl.xz, is gone too "
                               "(git checkout -- data/benchmarks)",
}


def add_data(parser: argparse.ArgumentParser) -> None:
    """`--data DIR`: the folder of the benchmark files, for this run."""
    parser.add_argument("--data", type=_use_data, metavar="DIR",
                        help="folder of the benchmark files (default: $SEMHIST_SHARED_DATA, else ../shared/data; "
                             "a file missing there is read from data/benchmarks/ when the repository ships it)")


def _use_data(value: str) -> Path:
    if not Path(value).is_dir():
        raise argparse.ArgumentTypeError(f"{value} is not a folder")
    # The flag is SEMHIST_SHARED_DATA for this run: data_file, and any child process, read one setting.
    os.environ["SEMHIST_SHARED_DATA"] = value
    return Path(value)


def data_file(name: str) -> Path:
    """The benchmark file `name` (locomo.jsonl, jmultiwoz_threads.jsonl, tiage.jsonl): from --data,
    else SEMHIST_SHARED_DATA, else ../shared/data; where that folder lacks it, the repository's
    compressed copy. Neither: the script stops with one sentence, what is missing and where it
    comes from."""
    folder = Path(os.environ.get("SEMHIST_SHARED_DATA") or SHARED_DATA)
    if (folder / name).is_file():
        return folder / name
    if (SHIPPED_DATA / f"{name}.xz").is_file():
        return _unpacked(name)
    raise SystemExit(f"{name} is not in {folder}: {ORIGINS.get(name, 'not a set the evaluation guide lists')}; "
                     "put it there, or name its folder with --data DIR or SEMHIST_SHARED_DATA "
                     "(docs/guides/evaluation.md, 'Benchmark files').")


@functools.cache
def _unpacked(name: str) -> Path:
    # unpacked for the run, not read compressed, so that every reader of the plain file works as it is
    tmp = Path(tempfile.mkdtemp(prefix="semhist-data-"))
    atexit.register(shutil.rmtree, tmp, True)
    with lzma.open(SHIPPED_DATA / f"{name}.xz") as src, (tmp / name).open("wb") as dst:
        shutil.copyfileobj(src, dst)
    print(f"{name}: reading the repository's copy, data/benchmarks/{name}.xz", file=sys.stderr)
    return tmp / name


# -- results -------------------------------------------------------------------------------------
def out_file(out: Path, name: str) -> Path:
    """out/name, the folder made if needed."""
    out.mkdir(parents=True, exist_ok=True)
    return out / name


def read_json(path: Path, default: Any) -> Any:
    """An earlier run's results (a rerun part or case replaces its own), or `default`."""
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else default


def write_json(path: Path, data: Any, end: str = "") -> None:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + end, encoding="utf-8")


def save(results: dict, out: Path, name: str, render: Callable[[dict], str]) -> None:
    """out/NAME.json (the figures, stamped) and out/NAME.md (`render(results)`), the table also printed."""
    results["generated"] = datetime.now().isoformat(timespec="seconds")
    write_json(out_file(out, f"{name}.json"), results)
    (out / f"{name}.md").write_text(render(results), encoding="utf-8")
    print(render(results))


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A markdown table's lines: the header, its rule, one line a row (cells as str())."""
    return (["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
            + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


# -- measuring -----------------------------------------------------------------------------------
def pct(values: Sequence[float], q: float, digits: int = 2) -> float | None:
    """The q-th percentile, rounded; None for no values."""
    return round(float(np.percentile(values, q)), digits) if len(values) else None


def rss_mb(pid: int | str = "self", field: str = "VmRSS") -> float:
    """A process's resident memory in MB from /proc (`RssAnon`: what it allocated itself,
    without the file pages it maps); NaN where the field is missing."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def fresh_pg(url: str) -> None:
    """Empty a scratch PostgreSQL database: schema public dropped and made again."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
        conn.execute("CREATE SCHEMA public")
        conn.execute("CHECKPOINT")


# -- a big thread from LoCoMo (scale, botloop, service_load) --------------------------------------
NOISE = 0.02  # sigma per dimension of the noise on repeated vectors (cosine ~0.9 to the original)


class ReadyVectors:
    """Hands out precomputed vectors in call order: the ingest path runs for real, embedding
    time is left out as the benchmark contract says."""

    def __init__(self, vectors: np.ndarray, dim: int, embedder_id: str):
        self.vectors, self.pos, self.dim, self.id = vectors, 0, dim, embedder_id

    def embed(self, texts, kind="passage"):
        out = self.vectors[self.pos:self.pos + len(texts)]
        self.pos += len(texts)
        return out


def corpus(n: int, cache_dir: Path):
    """n messages (repeated LoCoMo) with noisy real vectors, and LoCoMo's questions."""
    from semhist.indexers.embed import CachedEmbedder, EmbeddingCache, get_embedder
    from semhist.indexers.loader import load
    from semhist.kernel.model import embedding_text

    threads = load(data_file("locomo.jsonl")).threads
    base = [m for t in threads for m in t.messages if m.role != "system"]
    embedder = CachedEmbedder(get_embedder("use-m3"), EmbeddingCache(cache_dir / "embeddings.sqlite3"))
    base_vectors = embedder.embed([embedding_text(m) for m in base])
    # Time only moves forward, as in a real thread: each conversation follows the previous one
    # a day later, keeping its own pauses; each copy follows the last.
    offsets = [timedelta(0)]
    for prev, cur in zip(base, base[1:]):
        step = cur.timestamp - prev.timestamp
        offsets.append(offsets[-1] + (step if step >= timedelta(0) else timedelta(days=1)))
    span = offsets[-1] + timedelta(days=1)
    rng = np.random.default_rng(0)
    messages, vectors = [], np.empty((n, base_vectors.shape[1]), dtype=np.float32)
    start = base[0].timestamp
    for i in range(n):
        copy, k = divmod(i, len(base))
        src = base[k]
        messages.append(replace(src, index=i, timestamp=start + copy * span + offsets[k]))
    for lo in range(0, n, 100_000):
        hi = min(n, lo + 100_000)
        rows = base_vectors[np.arange(lo, hi) % len(base)]
        if lo >= len(base) or hi > len(base):
            rows = rows + NOISE * rng.standard_normal(rows.shape).astype(np.float32)
        vectors[lo:hi] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    questions = [q.text for t in threads for q in t.queries if q.has_evidence]
    return messages, vectors, questions


# -- the LLM's replies kept (llm_request, answers, sharded) ---------------------------------------
class RecordedLLM:
    """The real client, with its replies kept on disk by the exact request (a rerun of the
    benchmark with the same prompts reuses what the model said)."""

    def __init__(self, inner, path: Path):
        self.inner, self.model, self.path = inner, inner.model, path
        self.replies: dict[str, str] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                item = json.loads(line)
                self.replies[item["key"]] = item["reply"]
        self.asked, self.cached = 0, False

    def chat(self, messages, *, json_mode=False, json_schema=None, max_tokens=256, timeout=None) -> str:
        key = hashlib.sha256(json.dumps([self.model, list(messages), json_mode, json_schema, max_tokens],
                                        ensure_ascii=False, sort_keys=True).encode()).hexdigest()
        self.cached = key in self.replies  # a reply from the cache took no model time
        if key not in self.replies:
            reply = self.inner.chat(messages, json_mode=json_mode, json_schema=json_schema, max_tokens=max_tokens,
                                    timeout=timeout)
            self.asked += 1
            self.replies[key] = reply
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"key": key, "reply": reply}, ensure_ascii=False) + "\n")
        return self.replies[key]


def facts_named(answer: str, facts: dict[str, list[str]]) -> list[str]:
    """The facts an answer names (any of each fact's spellings in it)."""
    return [name for name, spellings in facts.items() if any(s in answer for s in spellings)]


# -- JMultiWOZ's dialogues (the time-anchored requests are built in time_threads.py) --------

def dialogues(path: Path) -> dict[str, list[list[int]]]:
    """Per thread id: the message positions of each dialogue, in order (annotations the loader
    drops, read here for the gold only)."""
    out = {}
    with path.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            runs: list[list[int]] = []
            for i, m in enumerate(row["messages"]):
                if not runs or row["messages"][runs[-1][-1]]["dialogue_id"] != m["dialogue_id"]:
                    runs.append([])
                runs[-1].append(i)
            out[row["id"]] = runs
    return out


# -- Teams-shaped threads ----------------------------------------------------------------------
TEAMS_PEOPLE = ("Taro Yamada", "Hanako Sato", "Mary Ann Lee")


def teams_shape(messages: list) -> list:
    """Messages as a Teams bot stores them: LoCoMo's speakers stay as names (a user message
    without one gets a person's), and one exchange in 20 becomes a tool call and its result
    (same count of messages, so vectors and evidence positions still line up)."""
    out = [replace(m, name=TEAMS_PEOPLE[i % len(TEAMS_PEOPLE)]) if m.role == "user" and not m.name else m
           for i, m in enumerate(messages)]
    for i in range(0, len(out) - 3, 20):
        if [m.role for m in out[i:i + 4]] == ["user", "assistant", "user", "assistant"]:
            call = {"id": f"call_{i}", "type": "function",
                    "function": {"name": "search_notes", "arguments": json.dumps({"q": out[i].content[:40]})}}
            out[i + 1] = replace(out[i + 1], content="", tool_calls=(call,), name=None)
            out[i + 2] = replace(out[i + 2], role="tool", tool_call_id=f"call_{i}", name=None)
    return out


TEAMS_SPEAKERS = ("Caroline", "Melanie", "Taro Yamada", "Hanako Sato", "Mary Ann Lee")


def teams_turn(turn: int, texts: list[str], when: datetime) -> tuple[list[list[dict]], list[dict]]:
    """One bot turn's writes as Teams delivers them: the user's adds before the ask (one, or
    one turn in five typed in two bursts a second apart) and the reply's add (with a tool call
    and its result first, one turn in four); each message with its speaker's name and an
    activity id as key (botloop.py, capacity.py)."""
    user, reply = texts[(2 * turn) % len(texts)], texts[(2 * turn + 1) % len(texts)]
    person = TEAMS_SPEAKERS[turn % len(TEAMS_SPEAKERS)]

    def msg(role, content, at, key, **extra):
        return {"role": role, "content": content, "timestamp": (when + timedelta(seconds=at)).isoformat(),
                "id": f"1:{turn}:{key}", **extra}
    users = [[msg("user", f"{user} ({turn})", 0, "u", name=person)]]
    if turn % 5 == 4:  # typed in two bursts
        users = [[msg("user", "Quick question:", 0, "u0", name=person)],
                 [msg("user", f"{user} ({turn})", 1, "u", name=person)]]
    out = []
    if turn % 4 == 3:
        call = {"id": f"call_t{turn}", "type": "function",
                "function": {"name": "search_tickets", "arguments": json.dumps({"q": user[:40]})}}
        out = [msg("assistant", "", 3, "c", tool_calls=[call]),
               msg("tool", f"ticket {turn}: {reply} " * 4, 4, "r", tool_call_id=f"call_t{turn}")]
    return users, out + [msg("assistant", f"{reply} ({turn})", 5, "a", name="semhist")]
