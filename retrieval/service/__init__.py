"""The HTTP service (`semhist serve`, extra `semhist[service]`): stored threads over JSON."""

from __future__ import annotations

from semhist.kernel.errors import missing_extra

try:
    import fastapi  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise missing_extra("fastapi", "service") from exc

from .app import app_from_env, create_app

__all__ = ["app_from_env", "create_app"]
