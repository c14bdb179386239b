"""What forgetting one message costs on a thread that has been asked many times: the write
transaction also removes the turn-log entries whose request was that message.

    python benchmarks/forget_cost.py --asks 50000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import datetime, timezone

from semhist.indexers.store import NewMessage, open_store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asks", type=int, default=50_000, help="turn-log entries of the thread")
    parser.add_argument("--repeat", type=int, default=5, help="messages forgotten one at a time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{tmp}/store.sqlite3")
        when = datetime(2026, 1, 1, tzinfo=timezone.utc)
        store.append("t", [NewMessage("user", f"message {i}", when, tokens=3) for i in range(args.repeat * 2)], None)
        for i in range(args.asks):
            store.log_turn("t", {"request": f"request number {i} about the Lisbon office", "strategy": "blocks"})
        times = []
        for message in store.messages("t")[: args.repeat]:
            start = time.perf_counter()
            store.forget_messages("t", ids=[message.id])
            times.append((time.perf_counter() - start) * 1000)
        store.close()
    times.sort()
    print(f"forget one message on a thread with {args.asks:,} logged asks (SQLite): "
          f"median {times[len(times) // 2]:.1f} ms, max {times[-1]:.1f} ms over {args.repeat}")


if __name__ == "__main__":
    main()
