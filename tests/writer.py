"""A writer process for the reliability tests: appends numbered messages to stored threads.

python -m tests.writer DB_URL DATA_DIR CACHE_DIR WRITER_NO COUNT THREAD [THREAD ...]
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone

from semhist.kernel.settings import Settings
from semhist.history import History


def main(argv: list[str]) -> None:
    url, data_dir, cache_dir, writer, count, *threads = argv
    history = History(Settings.load(env={}, db=url, data_dir=data_dir, cache_dir=cache_dir))
    start = datetime(2026, 5, 1, tzinfo=timezone.utc)
    for i in range(int(count)):
        thread = threads[i % len(threads)]
        # writers share timestamps on purpose: order must fall back to arrival
        history.add(thread, "user", f"writer {writer} message {i}", timestamp=start + timedelta(seconds=i // 4))
    history.close()


if __name__ == "__main__":
    main(sys.argv[1:])
