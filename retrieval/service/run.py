"""Start the service: settings to the workers, the loopback rule, one metrics directory."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from semhist.kernel.errors import ConfigError, missing_extra
from semhist.kernel.runtime import one_native_thread
from semhist.kernel.settings import Settings
from semhist.kernel.settings import redact

log = logging.getLogger("semhist.service")

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def check_exposure(host: str, settings: Settings, what: str = "SEMHIST_API_TOKEN") -> None:
    """Without a token (the operator's or scoped ones) the server is for this machine only,
    and says so."""
    if settings.api_token or settings.tokens or settings.tokens_file:
        return
    if host not in LOOPBACK:
        raise ConfigError(f"refusing to listen on {host} without authentication: set {what}, or bind to 127.0.0.1")
    log.warning("no %s set: no authentication, listening on %s only", what, host)


def worker_environment(overrides: Mapping[str, Any]) -> dict[str, str]:
    """The explicit settings as SEMHIST_* variables, so every worker process resolves the
    same settings the command line gave (explicit > environment > defaults holds there too)."""
    env = {}
    for name, value in overrides.items():
        if value is None:
            continue
        env[f"SEMHIST_{name.upper()}"] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return env


def serve(settings: Settings, overrides: Mapping[str, Any], *, host: str, port: int, workers: int,
          access_log: bool = False) -> None:
    try:
        import uvicorn
    except ImportError as exc:
        raise missing_extra("uvicorn", "service") from exc
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    check_exposure(host, settings)
    one_native_thread()
    # glibc gives each thread that allocates its own arena; with a pool of request threads a
    # worker's resident memory stepped up by ~100 MB under a burst and stayed (for the worker
    # processes it starts; a one-worker server runs in this process, already started)
    os.environ.setdefault("MALLOC_ARENA_MAX", "2")
    os.environ.update(worker_environment(overrides))
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="semhist-metrics-")
    for stale in Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or "/nonexistent").glob("*.db"):
        stale.unlink()  # figures of an earlier run would be added to this one's
    log.info("store %s; %d worker(s) on http://%s:%d", redact(settings.db_url), workers, host, port)
    from .connections import room_for_connections, uvicorn_options

    room_for_connections(settings)
    uvicorn.run("semhist.service.app:app_from_env", factory=True, host=host, port=port, workers=workers,
                access_log=access_log, log_level="info", timeout_graceful_shutdown=10,
                **uvicorn_options(settings))
