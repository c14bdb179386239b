"""Time-anchored requests on the public JMultiWOZ threads: "5月8日の21時台に話した内容",
"What did we talk about on May 8, 2024 at 9 pm?", "…on May 8?".

    python benchmarks/time_requests.py [--variant close] [--out DIR]   # one variant as JSON Lines

A request for an hour means the conversations that *started* in that hour, to their end: not
every message stamped 21:xx, not the whole day. The dialogue ids of JMultiWOZ give the gold:
every message of each dialogue whose first message falls in the named hour (or day). Three
variants of the threads:

- spaced: the file's own timestamps (dialogues 30 minutes to 3 days apart, so the time gaps
  alone find where a conversation ends);
- close: half of the dialogues start 20-50 s after the one before ends, as sessions of a real
  chat often do; then only the topic tells where one conversation ends and the next begins.
- long: consecutive dialogues joined into conversations of 60-200 messages, each dialogue
  starting 30-60 s after the one before ends (a user's sessions of one evening); each
  conversation keeps its first dialogue's time. A conversation is then several blocks (they
  are cut at max_block_tokens), and the hour a request names often begins inside one. The
  file's threads are joined one after another into threads of more than 5,000 messages (an
  hour of such a conversation is a quarter of one file thread, more than a 25% budget of it
  could hold), which requests read through candidate views, as a long chat's.

benchmarks/limits.py scores `blocks` on each (recall of the gold messages at 5/10/25%); both build
the variants with `time_threads` of benchmarks/time_threads.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from semhist.indexers.loader import load

from common import add_data, add_out, data_file, out_file, subset
from time_threads import time_threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data(parser)
    parser.add_argument("--variant", default="close", choices=("spaced", "close", "long"))
    parser.add_argument("--limit", type=int, help="only the first N threads of the file")
    add_out(parser, Path("."))  # DIR/time_requests.jsonl: the variant's threads, as JSON Lines
    args = parser.parse_args()
    path = data_file("jmultiwoz_threads.jsonl")
    threads = time_threads(subset(load(path).threads, args.limit), path)[args.variant]
    path = out_file(args.out, "time_requests.jsonl")
    with path.open("w", encoding="utf-8") as f:
        for t in threads:
            f.write(json.dumps({"id": t.id, "language": t.language, "messages": [
                {"role": m.role, "content": m.content, "timestamp": m.timestamp.isoformat(), "name": m.name}
                for m in t.messages], "queries": [
                {"query": q.text, "relevant_message_indices": list(q.relevant), "category": q.category}
                for q in t.queries]}, ensure_ascii=False) + "\n")
    print(f"wrote {path}: {sum(len(t.queries) for t in threads)} requests "
          f"(the {args.variant} variant; `semhist eval` scores it)")


if __name__ == "__main__":
    main()
