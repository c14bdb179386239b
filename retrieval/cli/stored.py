"""`semhist` commands over stored threads: ingest, add, threads, forget, reindex, log,
retention, stats, partitions. (`ask --thread` and `compare --thread` live with the file commands: one path.)"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone

from semhist.kernel.errors import InputError, NotFoundError
from semhist.kernel.settings import Settings
from semhist.kernel.ids import check_thread_id

from .. import render
from .files import load_thread, read_request


def _history(settings: Settings):
    from semhist import History

    return History(settings)


def _date(text: str, settings: Settings) -> datetime:
    from dateutil import parser as dparser
    from dateutil import tz

    try:
        moment = dparser.isoparse(text)
    except ValueError as exc:
        raise InputError(f"not an ISO date: {text!r} (e.g. 2026-01-31 or 2026-01-31T09:00+09:00)") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=tz.gettz(settings.timezone) or timezone.utc)


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> int:
    from tqdm import tqdm

    thread = load_thread(args.file, args.source_thread, settings)
    thread_id = check_thread_id(args.thread or thread.id)  # before the progress bar starts
    history = _history(settings)
    try:
        with tqdm(total=len(thread.messages), desc=f"ingesting {thread_id}", unit="msg", file=sys.stderr,
                  disable=args.quiet) as bar:
            result = history.ingest(thread_id, thread, progress=bar.update)
        print(f"{thread_id}: {result.added} added, {result.skipped} already stored, "
              f"{history.store.count(thread_id)} in the thread")
    finally:
        history.close()
    return 0


def cmd_add(args: argparse.Namespace, settings: Settings) -> int:
    history = _history(settings)
    try:
        stamp = _date(args.time, settings) if args.time else None
        text = read_request(args.text, what="message") if args.text == "-" else args.text
        mid = history.add(args.thread, args.role, text, name=args.name, timestamp=stamp, key=args.key)
        print(f"{args.thread}: message {mid} stored")
    finally:
        history.close()
    return 0


def cmd_threads(args: argparse.Namespace, settings: Settings) -> int:
    infos = _history(settings).threads()
    if args.json:
        print(json.dumps([render.thread_dict(i) for i in infos], ensure_ascii=False))
        return 0
    if not infos:
        print(f"no stored threads in {settings.db_url if not settings.db else 'the database'}")
        return 0
    rows = [[i.thread_id, i.messages, i.first.isoformat(timespec="seconds") if i.first else "-",
             i.last.isoformat(timespec="seconds") if i.last else "-",
             "-" if i.retention_days is None else f"{i.retention_days:g} d"] for i in infos]
    print(render.table(["thread", "messages", "first", "last", "retention"], rows))
    return 0


def cmd_forget(args: argparse.Namespace, settings: Settings) -> int:
    history = _history(settings)
    if args.expired:
        for thread_id, n in history.forget_expired().items():
            print(f"{thread_id}: {n} expired messages forgotten")
        return _after_forget(args, history)
    if not args.thread:
        raise InputError("name the thread: semhist forget --thread ID [--message N ...] [--before DATE], or --expired")
    if not history.store.has_thread(args.thread):
        raise NotFoundError(f"no stored thread {args.thread!r}; see semhist threads")
    before = _date(args.before, settings) if args.before else None
    n = history.forget(args.thread, ids=args.message or None, before=before)
    what = ("the whole thread" if not (args.message or before) else
            f"{n} message(s)" + (f" before {before.isoformat()}" if before else ""))
    print(f"{args.thread}: forgot {what} ({n} messages, their vectors, cached embeddings, index files, "
          "summaries, statements and log entries)")
    return _after_forget(args, history)


def _after_forget(args: argparse.Namespace, history) -> int:
    if args.vacuum:
        history.store.vacuum()
        print("store vacuumed: the space the forgotten rows held is rewritten")
    elif history.store.dialect == "postgresql":
        print("PostgreSQL keeps the deleted rows' bytes in its table pages (and its write-ahead log) until "
              "they are rewritten: semhist forget --vacuum runs VACUUM FULL (it locks semhist's tables while it runs)")
    return 0


def cmd_reindex(args: argparse.Namespace, settings: Settings) -> int:
    from tqdm import tqdm

    history = _history(settings)
    try:
        ids = [args.thread] if args.thread else [i.thread_id for i in history.threads()]
        for thread_id in ids:
            if not history.store.has_thread(thread_id):
                raise NotFoundError(f"no stored thread {thread_id!r}; see semhist threads")
            with tqdm(total=history.store.count(thread_id), desc=f"re-embedding {thread_id}", unit="msg",
                      file=sys.stderr, disable=args.quiet) as bar:
                n = history.reindex(thread_id, progress=bar.update)
            print(f"{thread_id}: {n} messages embedded with {history.parts.embedder.id}, segmented again, index rebuilt")
    finally:
        history.close()
    return 0


def cmd_log(args: argparse.Namespace, settings: Settings) -> int:
    turns = _history(settings).log(args.thread, args.limit)
    if args.json:
        print(json.dumps(turns, ensure_ascii=False, indent=2))
        return 0
    if not turns:
        print(f"{args.thread}: no asks logged yet")
    for t in turns:
        searched = (f"keyword [{', '.join(t['keyword'])}] ({t['extractor']}: {t['extractor_reason']})"
                    if t.get("keyword") is not None else "no search")
        print(f"{t['at']}  {t['strategy']}  tokens {t['prompt_tokens']}/{t['full_tokens']}  {searched}  "
              f"{t['timings_ms']['total_ms']} ms")
        print(f"  request: {t['request']}")
        for b in t["retrieved"]:
            print(f"  retrieved store ids {b['block_messages'][0]}-{b['block_messages'][1]}  score {b['score']}")
    return 0


def cmd_retention(args: argparse.Namespace, settings: Settings) -> int:
    history = _history(settings)
    if not history.store.has_thread(args.thread):
        raise NotFoundError(f"no stored thread {args.thread!r}; see semhist threads")
    try:
        days = None if args.days.lower() in ("off", "none") else float(args.days)
    except ValueError:
        days = -1.0
    if days is not None and not days > 0:
        raise InputError(f"--days must be a number of days > 0, or off; got {args.days!r}")
    removed = history.set_retention(args.thread, days)
    print(f"{args.thread}: retention {'off' if days is None else f'{days:g} days'}; {removed} messages forgotten now")
    return 0


def cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    from ..stats import stats

    report = stats(_history(settings).store, args.thread, settings.price_model)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
        return 0
    names = list(report["overall"])
    rows = [["overall"] + [report["overall"][n] for n in names]]
    rows += [[t] + [f[n] for n in names] for t, f in report["threads"].items()]
    print(render.table(["thread"] + names, [["-" if v is None else v for v in r] for r in rows]))
    return 0


def cmd_partitions(args: argparse.Namespace, settings: Settings) -> int:
    from tqdm import tqdm

    store = _history(settings).store
    if args.raise_to is not None:
        bars: list = []  # made at the first step, so a refused count shows no bar

        def progress(done: int, total: int) -> None:
            if not bars:
                bars.append(tqdm(total=total, desc="splitting partitions", unit="partition", file=sys.stderr,
                                 disable=args.json))
            bars[0].update(1)

        store.raise_partitions(args.raise_to, progress)
        for bar in bars:
            bar.close()
    tables = store.partitions()
    if args.json:
        print(json.dumps({name: {str(m): n for m, n in moduli.items()} for name, moduli in tables.items()}))
        return 0
    if not tables:
        print("not partitioned (SQLite: one file; PostgreSQL stores are partitioned by thread when opened)")
        return 0
    rows = [[name, sum(moduli.values()), ", ".join(f"{n} of modulus {m}" for m, n in sorted(moduli.items()))]
            for name, moduli in tables.items()]
    print(render.table(["table", "partitions", "hash partitions of thread_id"], rows))
    return 0
