"""`semhist ask`, `compare`, `eval` and `index`: a request over a history file or a stored
thread, side by side, over a benchmark, or indexed ahead of time."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from semhist.kernel.errors import BackendError, ConfigError, InputError
from semhist import load
from semhist.kernel.budget import Budget
from semhist.kernel.settings import Settings

from .. import render
from semhist import STRATEGIES

log = logging.getLogger("semhist")


def load_thread(path: str, thread_id: str | None, settings: Settings):
    result = load(path, timezone_name=settings.timezone, lenient=settings.lenient,
                  max_chars=settings.max_message_chars)
    for problem in result.problems:
        log.warning("skipped %s", problem)
    return result.only(thread_id)


def _budget(args: argparse.Namespace) -> Budget | None:
    return Budget.parse(args.budget) if args.budget else None


def _target(args: argparse.Namespace) -> tuple[str | None, str]:
    """(history file or None for a stored thread, the request)."""
    path, request = args.file, args.request
    if args.request_file is not None:  # then every positional is the file, or none is
        if args.request is not None:
            raise InputError("give the request as an argument or with --request-file, not both")
        request = read_request(args.request_file)
    elif args.request is None:  # semhist ask --thread ID "request": a stored thread
        path, request = None, args.file
    if path is None and not args.thread:
        raise InputError("give a history file and a request, or --thread ID and a request for a stored thread")
    if request is None:
        raise InputError("give the request (as an argument, '-' for standard input, or --request-file PATH)")
    return path, read_request("-") if request == "-" else request


def read_request(source: str, what: str = "request") -> str:
    """A request (or a message) from a file, or from standard input for '-': texts too long
    for the command line."""
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the {what} from {source}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig").rstrip("\r\n")
    except UnicodeDecodeError as exc:
        where = "standard input" if source == "-" else source
        raise InputError(f"the {what} on {where} is not valid UTF-8 (byte {exc.start}: {exc.reason})",
                         field=what) from None


def _results(args: argparse.Namespace, settings: Settings, strategies: list[str]):
    """Results for a file or a stored thread, and the object to close."""
    path, request = _target(args)
    if path is None:
        from semhist import History

        history = History(settings)
        if len(strategies) == 1:
            return [history.ask(args.thread, request, strategy=strategies[0], budget=_budget(args),
                                answer=getattr(args, "answer", False))], history
        return history.compare(args.thread, request, strategies, budget=_budget(args)), history
    from semhist import Engine

    thread = load_thread(path, args.thread, settings)
    index = getattr(args, "index", None)
    engine = Engine(settings, store=index, add_threads=index is None)
    if len(strategies) == 1:
        return [engine.ask(thread, request, strategy=strategies[0], budget=_budget(args),
                           answer=getattr(args, "answer", False))], engine
    return engine.compare(thread, request, strategies, budget=_budget(args)), engine


def cmd_ask(args: argparse.Namespace, settings: Settings) -> int:
    (result,), owner = _results(args, settings, [args.strategy])
    try:
        from semhist import Engine  # a file is asked through an Engine, a stored thread through History

        data = render.ask_dict(result, render.FILE_POSITIONS if isinstance(owner, Engine) else render.STORE_IDS)
        print(json.dumps(data, ensure_ascii=False, indent=2) if args.json else render.ask_text(data))
    finally:
        owner.close()
    _warn_if_starved([result])
    if result.answer_error is not None:  # after the prompt: what was built is not lost with the answer
        raise BackendError(f"no answer: {result.answer_error} (the prompt above is complete; a slow model "
                           f"needs a longer --llm-timeout, now {settings.llm_timeout:g} s)")
    return 0


def cmd_compare(args: argparse.Namespace, settings: Settings) -> int:
    wanted = args.strategy or list(STRATEGIES)
    results, owner = _results(args, settings, wanted)
    owner.close()
    _warn_if_starved(results)
    if not results:
        raise ConfigError(f"{', '.join(wanted)} need an LLM to summarize: set OPENAI_BASE_URL/OPENAI_API_KEY and "
                          "SEMHIST_LLM_MODEL, or run semhist llm-server")
    skipped = [n for n in wanted if n not in {r.strategy for r in results}]
    rows = render.compare_rows(results, settings.price_model, settings.layout_for(_budget(args)))
    if args.json:
        print(json.dumps({"thread": results[0].thread.id, "request": results[0].request,
                          "full_history_tokens": results[0].full_tokens, "strategies": rows,
                          "skipped": {n: "needs an LLM" for n in skipped}}, ensure_ascii=False, indent=2))
        return 0
    print(render.compare_text(rows, results[0].full_tokens))
    if settings.llm is None:
        print("LLM: none configured, so the keyword came from the local extractor "
              "(set OPENAI_BASE_URL or run semhist llm-server for the LLM keyword)")
    if skipped:
        print(f"skipped: {', '.join(skipped)} (they need an LLM to summarize; set OPENAI_BASE_URL "
              "or run semhist llm-server)")
    return 0


def _warn_if_starved(results) -> None:
    """On stderr too (stdout may be read by a program): the budget left out the last exchanges."""
    for r in results:
        if r.prompt.dropped_recent:
            said = next((n for n in r.prompt.notes if n.startswith("dropped")), "")
            log.warning("%s: %s", r.strategy, said)


def cmd_eval(args: argparse.Namespace, settings: Settings) -> int:
    from tqdm import tqdm

    from semhist import Engine
    from ..evaluate import evaluate, sample_queries
    from ..scoring import make_judge

    if not Path(args.dataset).exists():  # most often a benchmark set this checkout lacks: say where they are
        raise InputError(f"{args.dataset}: no such file; the evaluation guide (docs/guides/evaluation.md, "
                         "'Benchmark files') says where each benchmark file comes from")
    loaded = load(args.dataset, timezone_name=settings.timezone, lenient=settings.lenient,
                  max_chars=settings.max_message_chars)
    for problem in loaded.problems:
        log.warning("skipped %s", problem)
    threads = loaded.threads[: args.limit] if args.limit else loaded.threads
    if args.segmentation:
        return _eval_segmentation(args, settings, threads)
    if args.sample:
        threads = sample_queries(threads, args.sample)
    engine = Engine(settings)
    total = sum(1 for t in threads for q in t.queries if q.has_evidence)
    queries_bar = tqdm(total=total, desc="queries", unit="q", file=sys.stderr, disable=args.quiet)

    def on_thread(thread, n):
        bar = tqdm(total=n, desc=f"indexing {thread.id}", unit="msg", leave=False, file=sys.stderr,
                   disable=args.quiet)
        return bar.update

    try:
        report = evaluate(engine, threads, args.strategy or ["blocks"], budget=_budget(args),
                          dataset=Path(args.dataset).name, details=args.details, answer=args.answer,
                          judge_llm=make_judge(settings) if args.answer else None, on_thread=on_thread,
                          on_query=lambda: queries_bar.update(1))
    finally:
        queries_bar.close()
        engine.close()
    print(json.dumps(report, ensure_ascii=False) if args.json else render.eval_text(report))
    return 0


def _eval_segmentation(args: argparse.Namespace, settings: Settings, threads) -> int:
    from tqdm import tqdm

    from semhist import Engine
    from ..segscore import evaluate_segmentation, gold_starts

    gold = gold_starts(args.dataset)
    engine = Engine(settings, llm=None)
    scored = sum(1 for t in threads if gold.get(t.id))  # none: the error below, without a bar first
    bar = tqdm(total=scored, desc="segmenting", unit="thread", file=sys.stderr, disable=args.quiet or not scored)
    try:
        report = evaluate_segmentation(engine, threads, gold, dataset=Path(args.dataset).name,
                                       on_thread=lambda: bar.update(1))
    finally:
        bar.close()
        engine.close()
    print(json.dumps(report, ensure_ascii=False) if args.json else render.segmentation_text(report))
    return 0


def cmd_index(args: argparse.Namespace, settings: Settings) -> int:
    from tqdm import tqdm

    from semhist import Engine

    thread = load_thread(args.file, args.thread, settings)
    engine = Engine(settings, store=args.out)
    try:
        with tqdm(total=len(thread.messages), desc="indexing", unit="msg", file=sys.stderr) as bar:
            thread_id = engine.put(thread, progress=bar.update)
        blocks = len(engine.store.blocks(thread_id))
        print(f"indexed {engine.store.count(thread_id)} messages in {blocks} closed blocks and the open one with "
              f"{engine.parts.embedder.id} -> {args.out}")
    finally:
        engine.close()
    return 0
