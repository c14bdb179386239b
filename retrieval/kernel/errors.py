"""One error hierarchy for the whole project.

Library code raises these; only the CLI turns them into messages and exit codes.
"""

from __future__ import annotations


class SemhistError(Exception):
    """Base class of every error semhist raises on purpose."""

    exit_code = 1


class InputError(SemhistError):
    """The history or request given to us is unusable (bad JSON, bad field, bad time).
    `index` and `field` name the message and field at fault, when there is one."""

    exit_code = 2

    def __init__(self, message: str, *, index: int | None = None, field: str | None = None):
        super().__init__(message)
        self.index, self.field = index, field


class NotFoundError(InputError):
    """The thread or message named does not exist (or was forgotten)."""


class TooLargeError(InputError):
    """A message or request past a size limit (`SEMHIST_MAX_MESSAGE_CHARS` and the service's
    body and batch limits): the service answers 413."""


class TooLongError(InputError):
    """The thread is too long for what was asked of it (every message of a thread past what
    one prompt could hold); the message names what to ask instead."""


class ConfigError(SemhistError):
    """A setting, backend name or optional dependency is wrong or missing."""

    exit_code = 3


class IndexMismatchError(ConfigError):
    """A saved index was built with other settings than the ones asked for now."""


class BackendError(SemhistError):
    """A backend (embedder, LLM, FAISS) failed while doing its work."""

    exit_code = 4


def missing_extra(package: str, extra: str) -> ConfigError:
    """The error for an optional dependency that is not installed."""
    return ConfigError(
        f"{package} is not installed; install it with: pip install 'semhist[{extra}]'"
    )
