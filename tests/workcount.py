"""Counting work instead of timing it: what one call executes of semhist's own code.

Time on a shared 2-core machine is noise; counts are not. `count_work(fn)` runs `fn` under a
tracer and returns, for semhist's files only (retrieval/, indexers/):

- `lines`: Python lines executed (every row a loop walks shows up here);
- `tokenize`: calls of the lexical tokenizer (janome / Snowball);
- `token_counts`: tiktoken encodings (cache misses of the token counter);
- `store_reads`: read transactions opened on the store (`_read`, `_snapshot`);
- `store_rows`: message rows read back from the store.

The same call on the same data gives the same counts, whatever else the machine is doing.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import semhist
import semhist.indexers

# where the code under test is installed from (not where the tests are: a copy of the tests may run
# against another checkout's editable install)
OURS = tuple(str(Path(package.__file__).resolve().parent) + "/" for package in (semhist, semhist.indexers))
CALLS = {  # (file name, function) -> kind
    ("lexical.py", "tokenize"): "tokenize",
    ("tokens.py", "_count"): "token_counts",
    ("sqlite.py", "_read"): "store_reads", ("sqlite.py", "_snapshot"): "store_reads",
    ("postgres.py", "_read"): "store_reads", ("postgres.py", "_snapshot"): "store_reads",
    ("rows.py", "message_row"): "store_rows",
}


def count_work(fn: Callable[[], Any]) -> tuple[Any, Counter]:
    """`fn()`'s result and the work it did, by kind."""
    counts: Counter = Counter()
    # generator frames (context managers) count once, when they start; held so that no other
    # frame takes a finished one's id
    started: dict[int, Any] = {}

    def local(frame, event, arg):
        if event == "line":
            counts["lines"] += 1
        return local

    def tracer(frame, event, arg):
        filename = frame.f_code.co_filename
        if not filename.startswith(OURS):
            return None
        kind = CALLS.get((Path(filename).name, frame.f_code.co_name))
        if kind is not None and id(frame) not in started:
            counts[kind] += 1
            if frame.f_code.co_flags & 0x20:  # CO_GENERATOR: resumed later, the same frame
                started[id(frame)] = frame
        return local

    threading.settrace(tracer)
    sys.settrace(tracer)
    try:
        result = fn()
    finally:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
    return result, counts
