"""The `semhist` command: a thin shell over the library. Errors become messages and exit codes."""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
from collections.abc import Callable

from semhist.kernel.errors import SemhistError
from semhist.kernel.settings import CACHE, EMBED, INPUT, SEGMENT, STORE, WRITE, Settings

from .options import ASKING, FILES, READING, SERVING, WRITING, add_settings, settings_from

log = logging.getLogger("semhist")

Handler = Callable[[argparse.Namespace, Settings], int]

# semhist.STRATEGIES' names, written out: importing the strategies loads numpy, FAISS and the
# embedder, which `semhist ... --help` must not wait for (tests/test_cli_startup.py checks both).
STRATEGY_NAMES = ("full", "window", "token-budget", "summary", "structured", "utterances", "blocks")


def _handler(where: str) -> Handler:
    """A command's function named "module.function" (files.py, stored.py, serving.py), imported
    when the command runs: building the parser (so every --help) imports none of the library's
    heavy modules."""
    module, name = where.split(".")

    def run(args: argparse.Namespace, settings: Settings) -> int:
        return getattr(importlib.import_module(f".{module}", __package__), name)(args, settings)
    run.__name__ = run.__qualname__ = name
    return run


def cmd_llm_server(args: argparse.Namespace, settings: Settings) -> int:
    from tqdm import tqdm

    from ..llm.front import Front
    from ..llm.server import (MODEL_NAME, free_port, model_is_built, model_path, start_server, total_part_bytes,
                              wait_until_ready)

    if model_is_built(settings.cache_dir):
        path = model_path(settings.cache_dir)
    else:
        with tqdm(total=total_part_bytes(), desc="assembling the model", unit="B", unit_scale=True,
                  file=sys.stderr) as bar:
            path = model_path(settings.cache_dir, progress=bar.update)
    # llama.cpp on a private loopback port; the front on the one asked for reads tool calls the
    # model wrote as text (llm/toolcalls.py) and relays everything else as it is
    private = free_port()
    server = start_server(path, host="127.0.0.1", port=private, threads=args.threads, ctx_size=args.ctx_size)
    front = Front(args.host, args.port, f"http://127.0.0.1:{private}")
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
        front.close()
        del server
    return 0


AGENT_LOCALLY = """try it locally (no Azure registration, 127.0.0.1 only):
  semhist agent --anonymous
  # the Microsoft 365 Agents Playground (npm install -g @microsoft/m365agentsplayground),
  # started with `agentsplayground` and pointed at http://127.0.0.1:3978/api/messages, or any
  # client that posts Activity JSON; with "deliveryMode": "expectReplies" the replies come back
  # in the response:
  curl -s localhost:3978/api/messages -H 'content-type: application/json' -d '{"type": "message",
    "id": "1", "channelId": "msteams", "serviceUrl": "http://localhost", "deliveryMode": "expectReplies",
    "from": {"id": "29:me", "name": "Me"}, "recipient": {"id": "28:bot", "name": "semhist"},
    "conversation": {"id": "19:test@thread.v2"}, "text": "hello"}'"""


class _Intermixed(argparse.ArgumentParser):
    """A subcommand's parser that takes options anywhere on the line (`semhist ask FILE --budget
    10% REQUEST`): plain argparse fills FILE and REQUEST at the first positional it meets, so
    REQUEST after an option was refused. The top-level parser cannot intermix (it has
    subcommands), so each subcommand's parser does."""

    _inside = False

    def parse_known_args(self, args=None, namespace=None):
        if self._inside:  # parse_known_intermixed_args calls back in here (Python 3.10-3.12)
            return super().parse_known_args(args, namespace)
        self._inside = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inside = False


def _command(sub, name: str, handler: Handler | str, groups: tuple[str, ...], **kwargs) -> argparse.ArgumentParser:
    p = sub.add_parser(name, **kwargs)
    p.set_defaults(func=_handler(handler) if isinstance(handler, str) else handler, groups=groups)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="semhist", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-v", "--verbose", action="store_true", help="log more")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Intermixed)
    strategies = list(STRATEGY_NAMES)
    thread_help = "a stored thread's id (then no FILE), or which thread of a file that holds several"

    p = _command(sub, "ask", "files.cmd_ask", ASKING,
                 help="build the prompt for one request over a history file or a stored thread",
                 usage="semhist ask FILE REQUEST [options] | semhist ask --thread ID REQUEST [options]")
    p.add_argument("file", metavar="FILE", nargs="?", help="history: JSON list, {\"messages\": [...]}, JSON Lines, "
                                                          "or benchmark threads (omit it to ask a stored thread)")
    p.add_argument("request", nargs="?", help="the user's new request ('-': read it from standard input)")
    p.add_argument("--request-file", metavar="PATH", help="read the request from a file ('-': standard input)")
    p.add_argument("--strategy", default="blocks", choices=strategies)
    p.add_argument("--budget", help="hard prompt budget: tokens (2000), share of the full history (10%%), or "
                                    "billed tokens with the provider's prompt cache (1000b)")
    p.add_argument("--thread", help=thread_help)
    p.add_argument("--index", help="a directory written by semhist index (skips storing and embedding)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--answer", action="store_true", help="also send the prompt to the LLM and print the reply")

    p = _command(sub, "compare", "files.cmd_compare", ASKING, help="one request under every strategy, side by side",
                 usage="semhist compare FILE REQUEST [options] | semhist compare --thread ID REQUEST [options]")
    p.add_argument("file", metavar="FILE", nargs="?", help="history: JSON list, {\"messages\": [...]}, JSON Lines, "
                                                          "or benchmark threads (omit it to ask a stored thread)")
    p.add_argument("request", nargs="?", help="the user's new request ('-': read it from standard input)")
    p.add_argument("--request-file", metavar="PATH", help="read the request from a file ('-': standard input)")
    p.add_argument("--strategy", action="append", choices=strategies, help="repeat; default: all")
    p.add_argument("--budget", help="tokens (2000), a share (10%%) or billed tokens (1000b)")
    p.add_argument("--thread", help=thread_help)
    p.add_argument("--json", action="store_true")

    p = _command(sub, "eval", "files.cmd_eval", FILES, help="benchmark strategies on a dataset with ground truth")
    p.add_argument("dataset", metavar="DATASET",
                   help="threads with ground truth: JSON Lines, one thread a line ({\"id\", \"messages\", "
                        "\"queries\": [{\"query\", \"relevant_message_indices\", \"answer\"?, \"category\"?}]}; "
                        "with --segmentation, \"topic_segments\"), or one such thread as JSON")
    p.add_argument("--strategy", action="append", choices=strategies, help="repeat; default: blocks")
    p.add_argument("--budget", help="hard per-query budget: tokens or a share of each thread's history")
    p.add_argument("--limit", type=int, help="only the first N threads")
    p.add_argument("--sample", type=int, metavar="N",
                   help="N of the answerable queries, evenly spaced (the same N on every run)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--answer", action="store_true",
                   help="send each prompt to the LLM and score the answer (F1, judge, coverage, prefix reuse)")
    p.add_argument("--details", action="store_true",
                   help="with --json: one record per query (request analysis and where it came from, recall)")
    p.add_argument("--segmentation", action="store_true",
                   help="score the segmenter against the file's topic_segments (Pk, WindowDiff) instead")
    p.add_argument("--quiet", action="store_true", help="no progress bars")

    p = _command(sub, "index", "files.cmd_index", (EMBED, SEGMENT, INPUT, CACHE),
                 help="store and embed a history file once, for semhist ask --index")
    p.add_argument("file", metavar="FILE", help="history: JSON list, {\"messages\": [...]}, JSON Lines, or "
                                                "benchmark threads (--thread picks one)")
    p.add_argument("--out", required=True, help="directory to write")
    p.add_argument("--thread", help="which thread of a file that holds several")

    p = _command(sub, "ingest", "stored.cmd_ingest", WRITING, help="store a history file as a thread (idempotent)")
    p.add_argument("file", metavar="FILE", help="history: JSON list, {\"messages\": [...]}, JSON Lines, or "
                                                "benchmark threads (--source-thread picks one); messages "
                                                "already stored from the same file are skipped")
    p.add_argument("--thread", help="the stored thread's id (default: the file's thread id)")
    p.add_argument("--source-thread", help="which thread of the file, when it holds several")
    p.add_argument("--quiet", action="store_true")

    p = _command(sub, "add", "stored.cmd_add", (EMBED, SEGMENT, INPUT, STORE, WRITE, CACHE),
                 help="append one message to a stored thread")
    p.add_argument("text", help="the message ('-': read it from standard input)")
    p.add_argument("--thread", required=True)
    p.add_argument("--role", default="user", choices=["user", "assistant", "system"])
    p.add_argument("--name")
    p.add_argument("--time", help="ISO timestamp (default: now)")
    p.add_argument("--key", help="the caller's id for the message (e.g. a Teams activity id): adding it again "
                                 "stores nothing")

    p = _command(sub, "threads", "stored.cmd_threads", READING, help="list stored threads")
    p.add_argument("--json", action="store_true")

    p = _command(sub, "forget", "stored.cmd_forget", (SEGMENT, STORE, CACHE),
                 help="forget a thread, some messages, messages before a date, or expired ones")
    p.add_argument("--thread")
    p.add_argument("--message", type=int, action="append", help="a message id (repeat)")
    p.add_argument("--before", help="forget every message older than this ISO date")
    p.add_argument("--expired", action="store_true", help="apply every thread's retention period")
    p.add_argument("--vacuum", action="store_true", help="then rewrite the store's files without the deleted "
                                                         "rows (SQLite VACUUM; PostgreSQL VACUUM FULL, which "
                                                         "locks the tables while it runs)")

    p = _command(sub, "reindex", "stored.cmd_reindex", (EMBED, SEGMENT, STORE, WRITE, CACHE),
                 help="embed, tokenize and segment stored threads again with the current settings")
    p.add_argument("--thread", help="one thread (default: all)")
    p.add_argument("--quiet", action="store_true")

    p = _command(sub, "log", "stored.cmd_log", READING,
                 help="what every ask of a thread sent: keyword, blocks, scores, tokens, timings")
    p.add_argument("--thread", required=True)
    p.add_argument("--limit", type=int, help="the newest N asks")
    p.add_argument("--json", action="store_true")

    p = _command(sub, "retention", "stored.cmd_retention", READING,
                 help="keep a thread's messages for N days only (or off)")
    p.add_argument("--thread", required=True)
    p.add_argument("--days", required=True, help="days, or off")

    p = _command(sub, "stats", "stored.cmd_stats", READING,
                 help="monitoring figures from the turn log: tokens sent vs full history, compactions, LLM cost")
    p.add_argument("--thread", help="one thread only")
    p.add_argument("--json", action="store_true")

    p = _command(sub, "partitions", "stored.cmd_partitions", READING,
                 help="PostgreSQL: the hash partitions of semhist's tables by thread; --raise-to splits them")
    p.add_argument("--raise-to", type=int, metavar="N",
                   help="split every partition until each table has N (a multiple of the current count); "
                        "requests wait while each step moves one partition's rows")
    p.add_argument("--json", action="store_true")

    p = _command(sub, "serve", "serving.cmd_serve", SERVING,
                 help="serve stored threads over HTTP (JSON API, OpenAPI at /openapi.json; extra semhist[service])")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on; anything but loopback needs "
                                                       "SEMHIST_API_TOKEN")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=1, help="worker processes (share the store: use PostgreSQL "
                                                          "across machines)")
    p.add_argument("--access-log", action="store_true", help="log every request")

    p = _command(sub, "ui", "serving.cmd_ui", SERVING,
                 help="the web inspector over the local store: threads, blocks, each turn's prompt, try a request "
                      "(extra semhist[service]; loopback only)")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--no-browser", action="store_true", help="print the address instead of opening a browser")

    p = _command(sub, "agent", "serving.cmd_agent", ASKING,
                 help="a Teams agent (Microsoft 365 Agents SDK) that remembers its threads (extra semhist[teams])",
                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=AGENT_LOCALLY)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=3978)
    p.add_argument("--anonymous", action="store_true", help="accept unauthenticated requests (local development "
                                                            "only; loopback only)")
    p.add_argument("--framework-agent", metavar="FILE.py:NAME",
                   help="answer with a Microsoft Agent Framework agent: NAME(memory) returns an Agent that uses "
                        "memory as a context provider (extra semhist[agent-framework]; docs/samples/"
                        "teams_agent_framework.py)")

    p = _command(sub, "mcp", "serving.cmd_mcp", SERVING,
                 help="stored threads as an MCP server: search, recall, add, forget, list (extra semhist[mcp])")
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                   help="stdio (started by the client) or streamable HTTP at /mcp")
    p.add_argument("--host", default="127.0.0.1", help="http: address to listen on; anything but loopback needs "
                                                       "SEMHIST_API_TOKEN or scoped tokens")
    p.add_argument("--port", type=int, default=8765)

    p = _command(sub, "llm-server", cmd_llm_server, (CACHE,),
                 help="serve the packaged local LLM on 127.0.0.1 (OpenAI-compatible)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--threads", type=int, default=1, help="CPU threads for generation (1)")
    p.add_argument("--ctx-size", type=int, default=8192)

    for name, command in sub.choices.items():
        add_settings(command, command.get_default("groups"))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="semhist: %(levelname)s: %(message)s")
    try:
        return args.func(args, settings_from(args))
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
