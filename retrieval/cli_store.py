"""`semhist` commands over stored threads: ingest, add, ask --thread, threads, forget,
reindex, log, retention. Errors surface as SemhistError and main() turns them into exits."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import datetime, timezone

from indexers.errors import InputError
from indexers.settings import Budget, Settings
from indexers.store import check_thread_id

from . import render


def _history(settings: Settings):
    from .engine import Engine
    from .history import History

    return History(settings, engine=Engine(settings, record=True))


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

    from indexers.loader import load

    loaded = load(args.file, timezone_name=settings.timezone, lenient=settings.lenient)
    for problem in loaded.problems:
        print(f"semhist: skipped {problem}", file=sys.stderr)
    thread = loaded.only(args.source_thread)
    history = _history(settings)
    thread_id = check_thread_id(args.thread or thread.id)  # before the progress bar starts
    with tqdm(total=len(thread.messages), desc=f"ingesting {thread_id}", unit="msg", file=sys.stderr,
              disable=args.quiet) as bar:
        result = history.ingest(thread_id, thread, progress=bar.update)
    print(f"{thread_id}: {result.added} added, {result.skipped} already stored, "
          f"{history.store.count(thread_id)} in the thread")
    history.close()
    return 0


def cmd_add(args: argparse.Namespace, settings: Settings) -> int:
    history = _history(settings)
    stamp = _date(args.time, settings) if args.time else None
    mid = history.add(args.thread, args.role, args.text, name=args.name, timestamp=stamp)
    print(f"{args.thread}: message {mid} stored")
    history.close()
    return 0


def ask_stored(args: argparse.Namespace, settings: Settings) -> int:
    history = _history(settings)
    budget = Budget.parse(args.budget) if args.budget else None
    result = history.ask(args.thread, args.file, strategy=args.strategy, budget=budget, answer=args.answer)
    data = render.ask_dict(history.last_view.thread, result)
    print(json.dumps(data, ensure_ascii=False, indent=2) if args.json else render.ask_text(data))
    history.close()
    return 0


def cmd_threads(args: argparse.Namespace, settings: Settings) -> int:
    infos = _history(settings).threads()
    if args.json:
        print(json.dumps([{"thread": i.thread_id, "messages": i.messages,
                           "first": i.first.isoformat() if i.first else None,
                           "last": i.last.isoformat() if i.last else None,
                           "retention_days": i.retention_days} for i in infos], ensure_ascii=False))
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
        return 0
    if not args.thread:
        raise InputError("name the thread: semhist forget --thread ID [--message N ...] [--before DATE], or --expired")
    if not history.store.has_thread(args.thread):
        raise InputError(f"no stored thread {args.thread!r}; see semhist threads")
    before = _date(args.before, settings) if args.before else None
    n = history.forget(args.thread, ids=args.message or None, before=before)
    what = ("the whole thread" if not (args.message or before) else
            f"{n} message(s)" + (f" before {before.isoformat()}" if before else ""))
    print(f"{args.thread}: forgot {what} ({n} messages, their vectors, cached embeddings, index files, "
          "summaries, notes and log entries)")
    return 0


def cmd_reindex(args: argparse.Namespace, settings: Settings) -> int:
    from tqdm import tqdm

    history = _history(settings)
    ids = [args.thread] if args.thread else [i.thread_id for i in history.threads()]
    for thread_id in ids:
        if not history.store.has_thread(thread_id):
            raise InputError(f"no stored thread {thread_id!r}; see semhist threads")
        with tqdm(total=history.store.count(thread_id), desc=f"re-embedding {thread_id}", unit="msg",
                  file=sys.stderr, disable=args.quiet) as bar:
            n = history.reindex(thread_id, progress=bar.update)
        print(f"{thread_id}: {n} messages embedded with {history.engine.embedder.id}, index rebuilt")
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
            print(f"  retrieved messages {b['block_messages'][0]}-{b['block_messages'][1]}  score {b['score']}")
    return 0


def cmd_retention(args: argparse.Namespace, settings: Settings) -> int:
    history = _history(settings)
    if not history.store.has_thread(args.thread):
        raise InputError(f"no stored thread {args.thread!r}; see semhist threads")
    try:
        days = None if args.days.lower() in ("off", "none") else float(args.days)
    except ValueError:
        days = -1.0
    if days is not None and not days > 0:
        raise InputError(f"--days must be a number of days > 0, or off; got {args.days!r}")
    removed = history.set_retention(args.thread, days)
    print(f"{args.thread}: retention {'off' if days is None else f'{days:g} days'}; {removed} messages forgotten now")
    return 0


def store_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("store")
    g.add_argument("--db", help="sqlite:///path.db or postgresql://user@host/db (default: a SQLite file in the "
                                "user data directory; SEMHIST_DB)")
    g.add_argument("--data-dir", help="where the default database and FAISS files live (SEMHIST_DATA_DIR)")
    g.add_argument("--pii", help="mask e-mails, phones and card numbers before storing: on, off, or rule names "
                                 "(SEMHIST_PII; default off)")


def register(sub, settings_args: Callable, run: Callable) -> None:
    """Add the stored-thread subcommands; `run(fn)` wraps a handler with settings loading."""
    p = sub.add_parser("ingest", help="store a history file as a thread (idempotent)")
    p.add_argument("file")
    p.add_argument("--thread", help="the stored thread's id (default: the file's thread id)")
    p.add_argument("--source-thread", help="which thread of the file, when it holds several")
    p.add_argument("--quiet", action="store_true")
    store_args(p)
    settings_args(p)
    p.set_defaults(func=run(cmd_ingest))

    p = sub.add_parser("add", help="append one message to a stored thread")
    p.add_argument("text")
    p.add_argument("--thread", required=True)
    p.add_argument("--role", default="user", choices=["user", "assistant", "system"])
    p.add_argument("--name")
    p.add_argument("--time", help="ISO timestamp (default: now)")
    store_args(p)
    settings_args(p)
    p.set_defaults(func=run(cmd_add))

    p = sub.add_parser("threads", help="list stored threads")
    p.add_argument("--json", action="store_true")
    store_args(p)
    p.set_defaults(func=run(cmd_threads))

    p = sub.add_parser("forget", help="forget a thread, some messages, messages before a date, or expired ones")
    p.add_argument("--thread")
    p.add_argument("--message", type=int, action="append", help="a message id (repeat)")
    p.add_argument("--before", help="forget every message older than this ISO date")
    p.add_argument("--expired", action="store_true", help="apply every thread's retention period")
    store_args(p)
    settings_args(p)
    p.set_defaults(func=run(cmd_forget))

    p = sub.add_parser("reindex", help="re-embed stored threads with the current embedder and rebuild indexes")
    p.add_argument("--thread", help="one thread (default: all)")
    p.add_argument("--quiet", action="store_true")
    store_args(p)
    settings_args(p)
    p.set_defaults(func=run(cmd_reindex))

    p = sub.add_parser("log", help="what every ask of a thread sent: keyword, blocks, scores, tokens, timings")
    p.add_argument("--thread", required=True)
    p.add_argument("--limit", type=int, help="the newest N asks")
    p.add_argument("--json", action="store_true")
    store_args(p)
    p.set_defaults(func=run(cmd_log))

    p = sub.add_parser("retention", help="keep a thread's messages for N days only (or off)")
    p.add_argument("--thread", required=True)
    p.add_argument("--days", required=True, help="days, or off")
    store_args(p)
    p.set_defaults(func=run(cmd_retention))
