"""The process around semhist: native thread pools."""

from __future__ import annotations

import os


def one_native_thread() -> None:
    """For servers (`semhist serve`, `semhist agent`), which answer on several request threads
    and workers already: BLAS and OpenMP pools of their own on top spin on the same cores
    (100 bots on 2 cores: the query embedding took 40% of a worker, latency went to seconds).
    One thread each: the variables for libraries loaded later and for worker processes,
    threadpoolctl for those loaded now."""
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
