"""PostgreSQL's side of benchmarks/capacity.py (its part; no main): the size of semhist's
tables, the statements its connections ran (pg_stat_statements) and the server's CPU."""

from __future__ import annotations

import os
import re
from pathlib import Path


def pg_sql(url: str, sql: str, *args):
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(sql, args or None)  # no args: a % is a percent sign
        return cur.fetchall() if cur.description else []


def pg_table_bytes(url: str) -> dict[str, int]:
    rows = pg_sql(url, "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n "
                       "ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'")
    out: dict[str, int] = {}
    for name, size in rows:  # a hash partition (messages_p8_7) counts for its table
        table = re.sub(r"_p\d+_\d+$", "", name)
        out[table] = out.get(table, 0) + int(size)
    return out


def pg_cpu_s(url: str) -> float:
    """CPU seconds of every PostgreSQL process so far (backends, WAL writer, checkpointer):
    the server shares this machine, so /proc has them."""
    data_dir = pg_sql(url, "SHOW data_directory")[0][0]
    try:
        postmaster = int(Path(data_dir, "postmaster.pid").read_text().split()[0])
    except OSError:
        return float("nan")
    total = 0
    for pid in [postmaster, *_children(postmaster)]:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    return out


KINDS = ("select", "insert", "update", "delete", "other")


def pg_reset(url: str) -> None:
    pg_sql(url, "SELECT pg_stat_statements_reset()")


def pg_statements(url: str) -> dict[str, float]:
    """What semhist's connections ran since the reset: statements by kind, rows, shared
    buffer pages touched, read, dirtied, WAL bytes (the reading queries left out)."""
    rows = pg_sql(url, "SELECT query, calls, rows, shared_blks_hit, shared_blks_read, shared_blks_dirtied, "
                       "wal_bytes FROM pg_stat_statements WHERE query NOT ILIKE '%pg_stat%' "
                       "AND query NOT ILIKE 'SHOW %' AND dbid = (SELECT oid FROM pg_database "
                       "WHERE datname = current_database())")
    out = {f"{k}_calls": 0.0 for k in KINDS} | {"rows": 0.0, "pages_touched": 0.0, "pages_read": 0.0,
                                                 "pages_dirtied": 0.0, "wal_bytes": 0.0}
    for query, calls, n, hit, read, dirtied, wal in rows:
        word = query.lstrip("( ").split(None, 1)[0].lower() if query.strip() else "other"
        kind = word if word in KINDS else "select" if word == "with" else "other"
        out[f"{kind}_calls"] += calls
        out["rows"] += n
        out["pages_touched"] += hit + read
        out["pages_read"] += read
        out["pages_dirtied"] += dirtied
        out["wal_bytes"] += float(wal)
    out["statements"] = sum(out[f"{k}_calls"] for k in KINDS)
    out["writes"] = out["insert_calls"] + out["update_calls"] + out["delete_calls"]
    return out


def store_bytes(url: str) -> int:
    """semhist's tables on PostgreSQL (what a phase grew them by: the turn log, for asks)."""
    return sum(pg_table_bytes(url).values()) if url.startswith("postgres") else 0


def per_op(counts: dict[str, float], n: int) -> dict[str, float]:
    return {k: round(v / n, 2) for k, v in counts.items()}
