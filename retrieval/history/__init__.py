"""Stored threads: the facade (`History`), per-thread state, long-thread views, turn log."""

from .facade import History

__all__ = ["History"]
