"""The `semhist` command: a thin shell over the library. Errors become messages and exit codes."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from pathlib import Path

from indexers.errors import InputError, SemhistError
from indexers.loader import load
from indexers.settings import Budget, Settings

from . import cli_store, render
from .strategies import STRATEGIES

COMPARE_DEFAULT = list(STRATEGIES)
log = logging.getLogger("semhist")


def _settings_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("settings (override SEMHIST_* environment variables)")
    g.add_argument("--embedder", help="use-m3 (default), e5-small, or st:<model name or path>")
    g.add_argument("--segmenter", help="time-gap (default) or time+topic")
    g.add_argument("--gap", dest="gap_seconds", type=float, help="seconds of silence that start a block (300)")
    g.add_argument("--max-block-tokens", type=int, help="largest block in tokens (400)")
    g.add_argument("--top-n", type=int, help="blocks to retrieve (3)")
    g.add_argument("--min-score", type=float, help="minimum block score (off; 0.3 = the worked example)")
    g.add_argument("--relative-score", type=float, help="drop blocks below this share of the best score (0.5)")
    g.add_argument("--recent", type=int, help="recent messages kept verbatim (6)")
    g.add_argument("--window", type=int, help="messages kept by the window strategy (10)")
    g.add_argument("--utterance-k", type=int, help="messages retrieved by the utterances strategy (10)")
    g.add_argument("--keyword", choices=["auto", "llm", "local"], help="keyword extractor (auto)")
    g.add_argument("--timezone", help="zone for timestamps without one (UTC)")
    g.add_argument("--system-prompt", help="system prompt put first in every prompt")
    g.add_argument("--cache-dir", help="where embeddings and the local model are cached")
    g.add_argument("--blocks-memory", choices=["none", "structured", "summary"],
                   help="blocks also carries the user statements (structured) or the summary and them")
    g.add_argument("--summary-trigger", type=float, help="compact when the prompt passes this share of the budget (0.75)")
    g.add_argument("--alternate", action="store_true", default=None,
                   help="merge same-role turns for APIs that require user/assistant alternation")
    g.add_argument("--lenient", action="store_true", default=None,
                   help="skip and report bad messages instead of stopping")


def _settings(args: argparse.Namespace) -> Settings:
    names = ("embedder", "segmenter", "gap_seconds", "max_block_tokens", "top_n", "min_score", "relative_score",
             "recent", "window", "utterance_k", "keyword", "timezone",
             "system_prompt", "cache_dir", "lenient", "blocks_memory", "summary_trigger", "alternate",
             "db", "data_dir", "pii")
    return Settings.load(**{n: getattr(args, n, None) for n in names})


def _thread(args: argparse.Namespace, settings: Settings):
    result = load(args.file, timezone_name=settings.timezone, lenient=settings.lenient)
    for problem in result.problems:
        log.warning("skipped %s", problem)
    return result.only(args.thread)


def _engine(settings: Settings, record: bool = True):
    from .engine import Engine

    return Engine(settings, record=record)


def cmd_ask(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if args.request is None:  # semhist ask --thread ID "request": a stored thread
        if not args.thread:
            parser_error = "give a history file and a request, or --thread ID and a request for a stored thread"
            raise InputError(parser_error)
        from .cli_store import ask_stored

        return ask_stored(args, settings)
    thread = _thread(args, settings)
    engine = _engine(settings)
    if args.index:
        engine.use_index(thread, args.index)
    budget = Budget.parse(args.budget) if args.budget else None
    result = engine.ask(thread, args.request, strategy=args.strategy, budget=budget, answer=args.answer)
    data = render.ask_dict(thread, result)
    print(json.dumps(data, ensure_ascii=False, indent=2) if args.json else render.ask_text(data))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    settings = _settings(args)
    thread = _thread(args, settings)
    engine = _engine(settings)
    budget = Budget.parse(args.budget) if args.budget else None
    wanted = args.strategy or COMPARE_DEFAULT
    results = engine.compare(thread, args.request, wanted, budget=budget)
    skipped = [n for n in wanted if n not in {r.strategy for r in results}]
    rows = render.compare_rows(thread, results)
    if args.json:
        print(json.dumps({"thread": thread.id, "request": args.request, "full_history_tokens":
                          results[0].full_tokens, "strategies": rows,
                          "skipped": {n: "needs an LLM" for n in skipped}}, ensure_ascii=False, indent=2))
    else:
        print(render.compare_text(rows, results[0].full_tokens))
        if engine.llm is None:
            print("LLM: none configured, so the keyword came from the local extractor "
                  "(set OPENAI_BASE_URL or run semhist llm-server for the LLM keyword)")
        if skipped:
            print(f"skipped: {', '.join(skipped)} (they need an LLM to summarize; set OPENAI_BASE_URL "
                  "or run semhist llm-server)")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .evaluate import evaluate

    settings = _settings(args)
    loaded = load(args.dataset, timezone_name=settings.timezone, lenient=settings.lenient)
    for problem in loaded.problems:
        log.warning("skipped %s", problem)
    threads = loaded.threads[: args.limit] if args.limit else loaded.threads
    engine = _engine(settings, record=False)  # a benchmark is not traffic to monitor
    budget = Budget.parse(args.budget) if args.budget else None
    total = sum(1 for t in threads for q in t.queries if q.has_evidence)
    queries_bar = tqdm(total=total, desc="queries", unit="q", file=sys.stderr, disable=args.quiet)

    def on_thread(thread, n):
        bar = tqdm(total=n, desc=f"embedding {thread.id}", unit="msg", leave=False, file=sys.stderr,
                   disable=args.quiet)
        return bar.update

    report = evaluate(engine, threads, args.strategy or ["blocks"], budget=budget,
                      dataset=Path(args.dataset).name, on_thread=on_thread,
                      on_query=lambda: queries_bar.update(1))
    queries_bar.close()
    print(json.dumps(report, ensure_ascii=False) if args.json else render.eval_text(report))
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    settings = _settings(args)
    thread = _thread(args, settings)
    engine = _engine(settings)
    with tqdm(total=len(thread.messages), desc="embedding", unit="msg", file=sys.stderr) as bar:
        index = engine.index(thread, progress=bar.update)
    index.save(args.out)
    print(f"indexed {len(index.message_ids)} messages in {len(index.blocks)} blocks "
          f"with {index.embedder_id} -> {args.out}")
    return 0


def cmd_llm_server(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .llm_server import (MODEL_NAME, model_is_built, model_path, start_server, total_part_bytes,
                             wait_until_ready)

    settings = _settings(args)
    if model_is_built(settings.cache_dir):
        path = model_path(settings.cache_dir)
    else:
        with tqdm(total=total_part_bytes(), desc="assembling the model", unit="B", unit_scale=True,
                  file=sys.stderr) as bar:
            path = model_path(settings.cache_dir, progress=bar.update)
    server = start_server(path, host=args.host, port=args.port, threads=args.threads, ctx_size=args.ctx_size)
    base = f"http://{args.host}:{args.port}/v1"
    wait_until_ready(base)
    print(f"serving {MODEL_NAME} at {base}; to use it:\n"
          f"  export OPENAI_BASE_URL={base} OPENAI_API_KEY=local SEMHIST_LLM_MODEL={MODEL_NAME}\n"
          "Ctrl-C stops it.", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        del server
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from .engine import Engine
    from .stats import stats

    report = stats(Engine(_settings(args), llm=None).memory_store, args.thread)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
        return 0
    names = list(report["overall"])
    rows = [["overall"] + [report["overall"][n] for n in names]]
    rows += [[t] + [f[n] for n in names] for t, f in report["threads"].items()]
    print(render.table(["thread"] + names, [["-" if v is None else v for v in r] for r in rows]))
    return 0


def _run(handler):
    """Adapt a stored-thread handler to `args.func(args)`: settings resolve here, once."""
    def func(args: argparse.Namespace) -> int:
        return handler(args, _settings(args))
    return func


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="semhist", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-v", "--verbose", action="store_true", help="log more")
    sub = parser.add_subparsers(dest="command", required=True)
    strategies = list(STRATEGIES)

    p = sub.add_parser("ask", help="build the prompt for one request over a history file or a stored thread",
                       usage="semhist ask FILE REQUEST [options] | semhist ask --thread ID REQUEST [options]")
    p.add_argument("file", metavar="FILE", help="history: JSON list, {\"messages\": [...]}, JSON Lines, or "
                                               "benchmark thread (omit it to ask a stored thread)")
    p.add_argument("request", nargs="?", help="the user's new request")
    p.add_argument("--strategy", default="blocks", choices=strategies)
    p.add_argument("--budget", help="hard prompt budget: tokens (2000) or share of the full history (10%%)")
    p.add_argument("--thread", help="stored thread id (no FILE), or which thread of a file with several")
    p.add_argument("--index", help="a directory written by semhist index (skips embedding)")
    cli_store.store_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--answer", action="store_true", help="also send the prompt to the LLM and print the reply")
    _settings_args(p)
    p.set_defaults(func=cmd_ask)

    p = sub.add_parser("compare", help="one request under every strategy, side by side")
    p.add_argument("file")
    p.add_argument("request")
    p.add_argument("--strategy", action="append", choices=strategies, help="repeat; default: all")
    p.add_argument("--budget")
    p.add_argument("--thread")
    p.add_argument("--json", action="store_true")
    _settings_args(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("eval", help="benchmark strategies on a dataset with ground truth")
    p.add_argument("dataset", help="JSON Lines of benchmark threads")
    p.add_argument("--strategy", action="append", choices=strategies, help="repeat; default: blocks")
    p.add_argument("--budget", help="hard per-query budget: tokens or a share of each thread's history")
    p.add_argument("--limit", type=int, help="only the first N threads")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    _settings_args(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("index", help="embed a history once and save its FAISS index")
    p.add_argument("file")
    p.add_argument("--out", required=True, help="directory to write")
    p.add_argument("--thread")
    _settings_args(p)
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("stats", help="monitoring figures: tokens sent vs full history, compactions, LLM cost")
    p.add_argument("--thread", help="one thread only")
    p.add_argument("--json", action="store_true")
    p.add_argument("--cache-dir")
    p.set_defaults(func=cmd_stats)

    cli_store.register(sub, _settings_args, _run)

    p = sub.add_parser("llm-server", help="serve the packaged local LLM on 127.0.0.1 (OpenAI-compatible)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--threads", type=int, default=1, help="CPU threads for generation (1)")
    p.add_argument("--ctx-size", type=int, default=8192)
    p.add_argument("--cache-dir", help="where the assembled model is kept")
    p.set_defaults(func=cmd_llm_server)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="semhist: %(levelname)s: %(message)s")
    try:
        return args.func(args)
    except SemhistError as exc:
        print(f"semhist: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("semhist: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
