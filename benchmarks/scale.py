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

from common import (HOME_CACHE, NOISE, ROOT, ReadyVectors, add_data, add_out, corpus, fresh_pg, out_file, pct, rss_mb,
                    table, write_json)


def run_case(n: int, url: str, workdir: Path, cache_dir: Path) -> dict:
    from semhist.kernel.model import Thread
    from semhist.kernel.settings import Settings
    from semhist import History

    messages, vectors, questions = corpus(n, cache_dir)
    settings = Settings.load(env={}, db=url, data_dir=workdir / "data", cache_dir=cache_dir, batch_size=1000)
    history = History(settings)
    history.store.migrate()
    baseline = _disk(history, url, workdir)
    real_embedder = history.parts.ingestor.embedder
    history.parts.ingestor.embedder = ReadyVectors(vectors, real_embedder.dim, history.parts.embedder.id)
    t0 = time.perf_counter()
    history.ingest("big", Thread("big", tuple(messages)))
    ingest_s = time.perf_counter() - t0
    history.parts.ingestor.embedder = real_embedder

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
        vec = history.parts.embedder.embed([q], "query")[0]
        t1 = time.perf_counter()
        history.search("big", vec, k=10)
        search_ms.append((time.perf_counter() - t1) * 1000)
    history.close()
    disk = _disk(history, url, workdir) - baseline
    faiss_bytes = tv.path.stat().st_size
    return {
        "messages": n, "backend": url.split(":")[0], "faiss": tv.kind,
        "ingest_msgs_per_s": round(n / ingest_s), "faiss_build_s": round(index_s, 1), "recall_at_10": recall,
        "append_ms_p50": pct(append_ms, 50), "append_ms_p95": pct(append_ms, 95),
        "embed_ms_p50": pct(embed_ms, 50),
        "append_excl_embed_ms_p50": round(pct(append_ms, 50) - pct(embed_ms, 50), 2),
        "query_ms_p50": pct(query_ms[5:], 50), "query_ms_p95": pct(query_ms[5:], 95),
        "search_ms_p50": pct(search_ms[5:], 50), "search_ms_p95": pct(search_ms[5:], 95),
        "rss_mb": round(rss_mb()), "store_bytes_per_msg": round(disk / n), "faiss_bytes_per_msg": round(faiss_bytes / n),
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000,100000,1000000")
    p.add_argument("--pg", help="PostgreSQL URL of a scratch database (emptied per case)")
    p.add_argument("--workdir", default="/tmp/semhist-scale")
    p.add_argument("--cache-dir", default=str(HOME_CACHE))
    add_out(p)
    add_data(p)  # the LoCoMo the big threads repeat
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
                fresh_pg(url)
            print(f"-- {backend} {n:,} messages", file=sys.stderr, flush=True)
            out = subprocess.run([sys.executable, __file__, "--one", str(n), url, "--workdir", str(work),
                                  "--cache-dir", args.cache_dir], capture_output=True, text=True, cwd=ROOT)
            if out.returncode:
                sys.exit(f"case {backend} {n} failed:\n{out.stderr[-3000:]}")
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            if not args.keep:
                subprocess.run(["rm", "-rf", str(work)], check=True)
    write_json(out_file(args.out, "scale.json"), rows)
    (args.out / "scale.md").write_text(report(rows, bool(args.pg)), encoding="utf-8")
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
    lines += table(cols, [[r.get(c, "") for c in cols] for r in rows])
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
