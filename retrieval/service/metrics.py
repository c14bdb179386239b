"""Prometheus figures of the service: requests and latency per route, messages added and
stored, context tokens sent against what the full history would have cost.

With several workers (`semhist serve --workers N`) every worker writes its figures to
PROMETHEUS_MULTIPROC_DIR and `/metrics` adds them up, whichever worker answers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from semhist.kernel.errors import BackendError, missing_extra

# seconds: appends take milliseconds, context tens of ms, an LLM answer seconds
BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


def _prometheus():
    try:
        import prometheus_client
    except ImportError as exc:
        raise missing_extra("prometheus-client", "service") from exc
    return prometheus_client


class Metrics:
    def __init__(self) -> None:
        p = _prometheus()
        self.requests = p.Counter("semhist_http_requests", "HTTP requests answered", ["method", "route", "status"])
        self.latency = p.Histogram("semhist_http_request_seconds", "time to answer, per route", ["method", "route"],
                                   buckets=BUCKETS)
        self.added = p.Counter("semhist_messages_added", "messages stored by this service")
        self.prompt_tokens = p.Counter("semhist_context_prompt_tokens", "tokens of the prompts built")
        self.full_tokens = p.Counter("semhist_context_full_history_tokens",
                                     "tokens the full history would have cost for the same requests")
        self.cached_tokens = p.Counter("semhist_context_cached_tokens",
                                       "of the prompt tokens, those that repeat the start of the thread's previous "
                                       "prompt (what a provider's prompt cache holds while warm)")
        self.upstream_cached = p.Counter("semhist_upstream_cached_tokens",
                                         "prompt tokens the upstream reported read from its cache (usage)")
        self.loads = p.Counter("semhist_thread_loads", "threads read whole from the store (first ask in a "
                                                       "worker, after eviction or another process's rewrite)")

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    def exposition(self, totals: Callable[[], tuple[int, int]]) -> tuple[bytes, str]:
        """The text format: this process's figures (or every worker's), then the store's counts."""
        p = _prometheus()
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            registry = p.CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
        else:
            registry = p.REGISTRY
        stored = p.CollectorRegistry()
        stored.register(_StoreCollector(totals))
        return p.generate_latest(registry) + p.generate_latest(stored), p.CONTENT_TYPE_LATEST


class _StoreCollector:
    def __init__(self, totals: Callable[[], tuple[int, int]]):
        self.totals = totals

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        try:
            threads, messages = self.totals()
        except BackendError:  # the request figures still come; /healthz says the store is down
            return
        yield GaugeMetricFamily("semhist_threads_stored", "threads in the store", value=threads)
        yield GaugeMetricFamily("semhist_messages_stored", "messages in the store", value=messages)


@lru_cache(maxsize=1)
def metrics() -> Metrics:
    """One set per process: Prometheus refuses to register the same names twice."""
    return Metrics()


class Timing:
    """ASGI middleware: counts and times every request by its route template (never by the
    raw path, which holds thread ids: one series per route, not per thread)."""

    def __init__(self, app: Any, sink: Metrics):
        self.app, self.sink = app, sink

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500

        async def sending(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.sink.observe(scope["method"], route, status, time.perf_counter() - start)
