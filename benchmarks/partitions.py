"""What partitioning costs a PostgreSQL store that already holds threads: the migration that
partitions it by thread, then raising the partition count.

    python benchmarks/partitions.py --db postgresql://USER@127.0.0.1:PORT/SCRATCH_DB   # writes partitions.md

The scratch database is emptied, then filled as the release before partitioning left stores:
every migration but `0013_partitions_by_thread` applied, --bots threads of log-uniform sizes
(LoCoMo text with precomputed vectors, as service_load.py fills them). Then, timed: opening the
store (the migration copies every table into its partitions, one transaction), and
`raise_partitions` to --raise-to (one partition of every table per transaction). Rows are
counted before and after; one run, on a machine whose cores may be shared.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from common import add_data, add_out, fresh_pg, save, table
from service_bots import prefill


def _counts(url: str) -> dict[str, int]:
    import psycopg

    from semhist.indexers.store.partitions import TABLES

    with psycopg.connect(url) as conn:
        out = {t.name: conn.execute(f"SELECT COUNT(*) FROM {t.name}").fetchone()[0] for t in TABLES}
        out["bytes"] = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    return out


def run(args) -> dict:
    import semhist.indexers.store.sql as sql
    from semhist.indexers.store import open_store
    from semhist.indexers.store.migrations import MIGRATIONS
    from semhist.kernel.settings import Settings

    fresh_pg(args.db)
    every = sql.MIGRATIONS
    # a store that was never partitioned, with today's columns (today's code writes its rows):
    # every migration but the one that partitions, which the open_store below then applies
    sql.MIGRATIONS = tuple(m for m in MIGRATIONS if m[0] != "0013_partitions_by_thread")
    try:
        workdir = Path(tempfile.mkdtemp(prefix="semhist-partitions-"))
        sizes = prefill(args.db, workdir, Settings.load().cache_dir, args.bots, args.min_messages, args.max_messages)
    finally:
        sql.MIGRATIONS = every
    before = _counts(args.db)
    began = time.perf_counter()
    store = open_store(args.db)
    migrated = time.perf_counter() - began
    initial = store.partitions()["messages"]
    began = time.perf_counter()
    steps = store.raise_partitions(args.raise_to)
    raised = time.perf_counter() - began
    layout = store.partitions()["messages"]
    store.close()
    after = _counts(args.db)
    return {"command": "python benchmarks/partitions.py --db postgresql://... " + " ".join(
                f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("db", "out")),
            "messages": sum(sizes), "threads": args.bots, "bytes": before["bytes"], "migration_s": round(migrated, 2),
            "initial": {str(k): v for k, v in initial.items()}, "raise_s": round(raised, 2), "steps": steps,
            "raised": {str(k): v for k, v in layout.items()}, "rows_kept": before == {**after, "bytes": before["bytes"]},
            "rows": {k: v for k, v in before.items() if k != "bytes"}, "cores": os.cpu_count()}


def render(r: dict) -> str:
    rows = [["migration 0013 (copy into 8 partitions, one transaction)", r["migration_s"],
             f"{r['migration_s'] * 1e6 / r['messages']:.0f}"],
            [f"raise to {next(iter(r['raised']))} partitions ({r['steps']} steps)", r["raise_s"],
             f"{r['raise_s'] * 1e6 / r['messages']:.0f}"]]
    return "\n".join([
        "# Partitioning a PostgreSQL store that holds threads", "",
        f"`{r['command']}`: {r['threads']:,} threads, {r['messages']:,} messages, "
        f"{r['bytes'] / 2**20:,.0f} MB database, {r['cores']} cores (shared). Every row kept: {r['rows_kept']}.", "",
        *table(["step", "seconds", "µs per message"], rows), ""])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", required=True, help="postgresql://... (a scratch database: emptied)")
    p.add_argument("--bots", type=int, default=100, help="threads")
    p.add_argument("--min-messages", type=int, default=500)
    p.add_argument("--max-messages", type=int, default=2000)
    p.add_argument("--raise-to", type=int, default=16)
    add_out(p)
    add_data(p)  # the LoCoMo the bots' threads repeat
    args = p.parse_args()
    result = run(args)
    save(result, args.out, "partitions", render)


if __name__ == "__main__":
    main()
