"""`Engine`: a `History` over a store of its own, for history files and `Thread` objects.

It adds no way of asking: `ask`, `compare`, `index` and `put` are History's, which store a
thread object once and ask it as a bot's stored thread is asked. What it adds is where the
store lives: a temporary SQLite file gone with the process, or a directory written by
`semhist index` (with `add_threads=False`, only the threads it holds are asked).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from semhist.indexers.store import SQLStore, open_store
from semhist.kernel.settings import Settings

from .history import History
from .llm import LLMClient


class Engine(History):
    """semhist's library entry point for histories held in memory or read from files."""

    def __init__(self, settings: Settings | None = None, *, llm: LLMClient | None | str = "auto",
                 store: str | Path | SQLStore | None = None, add_threads: bool = True):
        settings = settings or Settings.load()
        self._scratch: Path | None = None
        if store is None:  # a store of our own, gone with the process
            self._scratch = Path(tempfile.mkdtemp(prefix="semhist-files-"))
            atexit.register(shutil.rmtree, self._scratch, True)
            store = self._scratch
        if isinstance(store, (str, Path)):
            directory = Path(store)
            settings = replace(settings, data_dir=directory, db=f"sqlite:///{directory / 'semhist.sqlite3'}")
            store = open_store(settings.db_url)
        super().__init__(settings, store=store, llm=llm, cache_writes=True, add_threads=add_threads)

    def close(self) -> None:
        super().close()
        self.store.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
