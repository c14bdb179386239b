"""Scale benchmark of the store: one thread of 10k, 100k and 1M messages on SQLite and PostgreSQL.

    python benchmarks/scale.py --pg postgresql://user@127.0.0.1:5432/db   # writes benchmarks/scale.md

Messages are LoCoMo's real conversations repeated (timestamps shifted forward, so the thread
reads as months of chat). Their vectors are the real USE-m3 vectors of those messages plus a
little Gaussian noise (sigma 0.02 per dimension, cosine ~0.9 to the original), so that the
repeats are not identical points for FAISS; this is said in the output. Bulk ingest therefore
excludes embedding time (the vectors are ready), but includes masking, tokenizing, storing,
segmenting and committing. Appends and queries use the real embedder. Each size and backend
runs in its own process, so resident memory is measured per case.

Without --pg the PostgreSQL rows are skipped (the output says so). The PostgreSQL database is
emptied (schema public dropped) before each case: give it a scratch database.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "locomo.jsonl"
NOISE = 0.02


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


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
    from dataclasses import replace

    from semhist.kernel.model import embedding_text

    threads = load(DATA).threads
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


def _pct(values, q):
    return round(float(np.percentile(values, q)), 2)


def run_case(n: int, url: str, workdir: Path, cache_dir: Path) -> dict:
    from semhist.kernel.model import Thread
    from semhist.kernel.settings import Settings
    from semhist import History

    messages, vectors, questions = corpus(n, cache_dir)
    settings = Settings.load(env={}, db=url, data_dir=workdir / "data", cache_dir=cache_dir, batch_size=1000)
    history = History(settings)
    history.store.migrate()
    baseline = _disk(history, url, workdir)
    real_embedder = history.ingestor.embedder
    history.ingestor.embedder = ReadyVectors(vectors, real_embedder.dim, history.embedder.id)
    t0 = time.perf_counter()
    history.ingest("big", Thread("big", tuple(messages)))
    ingest_s = time.perf_counter() - t0
    history.ingestor.embedder = real_embedder

    t0 = time.perf_counter()
    tv = history.vectors("big")  # first open: builds the FAISS index from the store (in the background)
    tv.wait()
    index_s = time.perf_counter() - t0
    recall = _recall(history, tv, vectors)
    last = messages[-1].timestamp
    del messages, vectors  # resident memory below is the service's, not the generated corpus's
    gc.collect()

    # appends: the real embedder, one message each, timestamps after the last one
    embed_ms, append_ms = [], []
    for i in range(100):
        text = f"follow-up {i}: did we book the table for Friday?"
        t1 = time.perf_counter()
        real_embedder.embed([text])
        embed_ms.append((time.perf_counter() - t1) * 1000)
        t1 = time.perf_counter()
        history.add("big", "user", text, timestamp=last + timedelta(seconds=20 * (i + 1)))
        append_ms.append((time.perf_counter() - t1) * 1000)

    query_ms, search_ms = [], []
    for i, q in enumerate(questions[:60]):
        t1 = time.perf_counter()
        history.ask("big", q, log_turn=False)
        query_ms.append((time.perf_counter() - t1) * 1000)
        vec = history.embedder.embed([q], "query")[0]
        t1 = time.perf_counter()
        history.search("big", vec, k=10)
        search_ms.append((time.perf_counter() - t1) * 1000)
    history.close()
    disk = _disk(history, url, workdir) - baseline
    faiss_bytes = tv.path.stat().st_size
    return {
        "messages": n, "backend": url.split(":")[0], "faiss": tv.kind,
        "ingest_msgs_per_s": round(n / ingest_s), "faiss_build_s": round(index_s, 1), "recall_at_10": recall,
        "append_ms_p50": _pct(append_ms, 50), "append_ms_p95": _pct(append_ms, 95),
        "embed_ms_p50": _pct(embed_ms, 50),
        "append_excl_embed_ms_p50": round(_pct(append_ms, 50) - _pct(embed_ms, 50), 2),
        "query_ms_p50": _pct(query_ms[5:], 50), "query_ms_p95": _pct(query_ms[5:], 95),
        "search_ms_p50": _pct(search_ms[5:], 50), "search_ms_p95": _pct(search_ms[5:], 95),
        "rss_mb": round(_rss_mb()), "store_bytes_per_msg": round(disk / n), "faiss_bytes_per_msg": round(faiss_bytes / n),
        "view": "whole thread" if n <= settings.view_limit else "candidates",
    }


def _recall(history, tv, vectors: np.ndarray, queries: int = 100) -> float:
    """recall@10 of the thread's FAISS index against exact search over the same vectors."""
    rng = np.random.default_rng(1)
    ids = np.concatenate([i for i, _ in history.store.vectors("big", batch=100_000)])
    picks = rng.choice(len(vectors), queries, replace=False)
    hits = []
    for p in picks:
        q = vectors[p] + 0.05 * rng.standard_normal(vectors.shape[1]).astype(np.float32)
        q /= np.linalg.norm(q)
        exact = set(ids[np.argpartition(-(vectors @ q), 10)[:10]])
        hits.append(len(exact & set(tv.search(q, 10)[1].tolist())) / 10)
    return round(float(np.mean(hits)), 3)


def _disk(history, url: str, workdir: Path) -> int:
    if url.startswith("sqlite"):
        path = Path(history.store.path)
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    with history.store._read() as cur:
        cur.execute("SELECT pg_database_size(current_database())")
        return int(cur.fetchone()[0])


def _fresh_pg(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
        conn.execute("CREATE SCHEMA public")
        conn.execute("CHECKPOINT")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000,100000,1000000")
    p.add_argument("--pg", help="PostgreSQL URL of a scratch database (emptied per case)")
    p.add_argument("--workdir", default="/tmp/semhist-scale")
    p.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "semhist"))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "scale"))
    p.add_argument("--keep", action="store_true", help="keep each case's database and files")
    p.add_argument("--one", nargs=2, metavar=("N", "URL"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(run_case(int(args.one[0]), args.one[1], Path(args.workdir), Path(args.cache_dir))))
        return
    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        for backend in ["sqlite"] + (["postgresql"] if args.pg else []):
            work = Path(args.workdir) / f"{backend}-{n}"
            subprocess.run(["rm", "-rf", str(work)], check=True)
            work.mkdir(parents=True)
            url = f"sqlite:///{work / 'store.sqlite3'}" if backend == "sqlite" else args.pg
            if backend == "postgresql":
                _fresh_pg(url)
            print(f"-- {backend} {n:,} messages", file=sys.stderr, flush=True)
            out = subprocess.run([sys.executable, __file__, "--one", str(n), url, "--workdir", str(work),
                                  "--cache-dir", args.cache_dir], capture_output=True, text=True, cwd=ROOT)
            if out.returncode:
                sys.exit(f"case {backend} {n} failed:\n{out.stderr[-3000:]}")
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            if not args.keep:
                subprocess.run(["rm", "-rf", str(work)], check=True)
    Path(args.out + ".json").write_text(json.dumps(rows, indent=1))
    Path(args.out + ".md").write_text(report(rows, bool(args.pg)))
    print(report(rows, bool(args.pg)))


def report(rows: list[dict], with_pg: bool) -> str:
    cols = ["backend", "messages", "ingest_msgs_per_s", "append_ms_p50", "append_ms_p95", "embed_ms_p50",
            "append_excl_embed_ms_p50",
            "query_ms_p50", "query_ms_p95", "search_ms_p50", "search_ms_p95", "rss_mb", "store_bytes_per_msg",
            "faiss_bytes_per_msg", "faiss", "faiss_build_s", "recall_at_10", "view"]
    lines = ["# Store at scale (`python benchmarks/scale.py --pg URL`)", "",
             f"Machine: {os.cpu_count()} cores. One thread per case; LoCoMo repeated, vectors = real USE-m3 vectors "
             f"+ N(0, {NOISE}) noise (precomputed, so ingest excludes embedding). Appends and queries use the real "
             "embedder; append_ms includes one embedding (embed_ms_p50 alone). query = local keyword + query "
             "embedding + view + hybrid selection + prompt assembly, no LLM; search = FAISS top-10 + fetching those "
             "messages from the store.", ""]
    if not with_pg:
        lines += ["PostgreSQL: skipped (no --pg URL given).", ""]
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "---|" * len(cols))
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
