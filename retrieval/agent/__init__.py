"""A Teams agent on the Microsoft 365 Agents SDK (`semhist agent`, extra `semhist[teams]`).

Reuse the parts in your own agent::

    adapter.use(ThreadMemory(history))     # stores every message in and out
    SemhistAgent(history).register(app)    # answers from the history; /forget, /sources
"""

from .handler import SemhistAgent
from .memory import ThreadMemory, thread_id_for

__all__ = ["SemhistAgent", "ThreadMemory", "thread_id_for"]
