"""The simulation of benchmarks/capacity.py (its part; no main): Teams-like activity on a
population of threads, the per-replica LRU of thread states, and the figures `measure` wrote
turned into a sizing. numpy throughout, one seed.

The LRU of a replica is evaluated on a time grid: at each grid time the threads are ranked by
their last turn, and a state survives while fewer than `cache_threads` other threads, and fewer
than `cache_mb` of their states, were touched since its own last turn. That is exactly the LRU
rule (an LRU keeps the most recently used), read every GRID_S seconds instead of at every turn;
`lru_exact` replays the same turns through an OrderedDict to check it.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from common import data_file, teams_turn

DAY, WEEK = 86_400, 7 * 86_400
DAYS = 14  # simulated: the first week warms the caches, the second is measured
GRID_S = 600  # how often the LRU's ranking is read

# Activity classes: share of threads, median sessions a week, spread (sigma of the lognormal).
# Chosen to look like a company's Teams bot, not measured: a few threads used daily, many
# weekly, most seldom or never (the idle tail that only costs disk).
CLASSES = (("daily", 0.08, 8.0, 0.5), ("weekly", 0.22, 1.5, 0.6), ("monthly", 0.30, 0.25, 0.7),
           ("idle", 0.40, 0.01, 1.0))
TURNS_PER_SESSION = 4.0  # mean, geometric: a burst of a few turns
TURN_GAP_S = 45.0  # mean pause between the turns of a session (exponential)
AGE_WEEKS = 52.0  # the deployment has run a year: threads were started uniformly over it
MIN_MESSAGES = 10
WEEKEND = 0.08  # a weekend hour against the same weekday hour
HOURS = np.array([0.03, 0.02, 0.02, 0.02, 0.02, 0.04, 0.10, 0.30, 0.70, 1.00, 1.00, 0.95,
                  0.60, 0.90, 1.00, 1.00, 0.90, 0.60, 0.30, 0.15, 0.10, 0.08, 0.05, 0.04])  # one time zone


def turn_mix() -> dict[str, float]:
    """Appends and messages per turn as the measured Teams turns make them (common.teams_turn
    over its 20-turn cycle: bursts one turn in five, tool calls one in four)."""
    appends = messages = 0
    for t in range(20):
        users, reply = teams_turn(t, ["x"], datetime(2026, 1, 1))
        appends += len(users) + 1
        messages += sum(len(b) for b in users) + len(reply)
    return {"asks": 1.0, "appends": appends / 20, "messages": messages / 20}


# -- the population and its turns -------------------------------------------------------------
@dataclass
class Replay:
    rate: np.ndarray  # sessions a week, per thread
    length: np.ndarray  # messages stored when the replay starts
    klass: np.ndarray  # index into CLASSES
    time: np.ndarray  # seconds since Monday 00:00 of week 1, one entry a turn, sorted
    thread: np.ndarray  # the turn's thread


def population(n: int, rng: np.random.Generator, msgs_per_turn: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    shares = np.array([c[1] for c in CLASSES])
    klass = rng.choice(len(CLASSES), size=n, p=shares / shares.sum())
    median = np.array([c[2] for c in CLASSES])[klass]
    sigma = np.array([c[3] for c in CLASSES])[klass]
    rate = median * np.exp(sigma * rng.standard_normal(n))
    age = rng.uniform(0, AGE_WEEKS, n)
    length = MIN_MESSAGES + rng.poisson(rate * age * TURNS_PER_SESSION * msgs_per_turn)
    return rate, length, klass


def week_curve() -> np.ndarray:
    """Relative activity of each minute of a week, Monday first."""
    day = np.repeat(HOURS, 60)
    return np.concatenate([day] * 5 + [day * WEEKEND] * 2)


def replay(n: int, seed: int) -> Replay:
    rng = np.random.default_rng(seed)
    rate, length, klass = population(n, rng, turn_mix()["messages"])
    sessions = rng.poisson(rate * DAYS / 7)
    owner = np.repeat(np.arange(n, dtype=np.int32), sessions)
    curve = np.tile(week_curve(), DAYS // 7)
    minute = rng.choice(curve.size, size=owner.size, p=curve / curve.sum())
    start = (minute + rng.random(owner.size)) * 60.0
    turns = rng.geometric(1 / TURNS_PER_SESSION, owner.size)
    first = np.repeat(np.cumsum(turns) - turns, turns)  # each turn's session's first turn
    gaps = rng.exponential(TURN_GAP_S, turns.sum())
    gaps[np.cumsum(turns) - turns] = 0.0
    elapsed = np.cumsum(gaps)
    time = np.repeat(start, turns) + elapsed - elapsed[first]
    thread = np.repeat(owner, turns)
    keep = time < DAYS * DAY
    order = np.argsort(time[keep], kind="stable")
    return Replay(rate, length, klass, time[keep][order], thread[keep][order])


def active(r: Replay) -> np.ndarray:
    """Threads with a turn in the measured (second) week: the active conversations."""
    return np.unique(r.thread[r.time >= WEEK])


def peak_rate(times: np.ndarray, window_s: int = 300) -> tuple[float, float]:
    """(mean, peak over `window_s`) turns per second in the measured week."""
    t = times[times >= WEEK] - WEEK
    counts = np.bincount((t // window_s).astype(np.int64), minlength=WEEK // window_s)
    return len(t) / WEEK, counts.max() / window_s


# -- the LRU of one replica --------------------------------------------------------------------
def previous_turn(time: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """Each turn's thread's previous turn time (-inf: none in the replay)."""
    order = np.lexsort((time, thread))
    prev = np.full(time.size, -np.inf)
    same = thread[order][1:] == thread[order][:-1]
    prev[order[1:][same]] = time[order][:-1][same]
    return prev


def lru_grid(time: np.ndarray, thread: np.ndarray, nbytes: np.ndarray,
             configs: list[tuple[int, float]]) -> list[dict]:
    """Per (cache_threads, cache_bytes): which turns found their thread's state (see the module
    docstring), and the bytes the cache held at its fullest in the measured week."""
    prev = previous_turn(time, thread)
    grid = np.arange(0, time[-1] + GRID_S, GRID_S) if time.size else np.zeros(1)
    cuts = np.searchsorted(time, grid, side="right")
    last = np.full(nbytes.size, -np.inf)
    horizon = np.zeros((len(configs), grid.size))
    held = np.zeros((len(configs), grid.size))
    cmax = max(c for c, _ in configs)
    for k, g in enumerate(grid):
        lo, hi = (cuts[k - 1] if k else 0), cuts[k]
        if hi > lo:
            rev = thread[lo:hi][::-1]
            ids, at = np.unique(rev, return_index=True)  # the last turn of each thread in the step
            last[ids] = time[lo:hi][::-1][at]
        horizon[:, k], held[:, k] = _horizons(g, last, nbytes, configs, cmax)
    step = np.clip(np.searchsorted(grid, time, side="right") - 1, 0, grid.size - 1)
    out = []
    measured = time >= WEEK
    for i, (c, b) in enumerate(configs):
        hit = (time - prev) < horizon[i, step]
        out.append({"cache_threads": c, "cache_bytes": b, "hit": hit, "loads_per_ask": float(1 - hit[measured].mean()),
                    "held_bytes_max": float(held[i, grid >= WEEK].max())})
    return out


def _horizons(g: float, last: np.ndarray, nbytes: np.ndarray, configs, cmax: int):
    """For each config: how long an untouched state survives at time g, and what the cache holds."""
    seen = np.flatnonzero(last > -np.inf)
    age = g - last[seen]
    if seen.size > cmax:
        part = np.argpartition(age, cmax)[:cmax + 1]
        seen, age = seen[part], age[part]
    order = np.argsort(age, kind="stable")
    age, size = age[order], np.cumsum(nbytes[seen[order]])
    horizons, helds = [], []
    for c, b in configs:
        keep = min(c, int(np.searchsorted(size, b, side="right")), age.size)
        horizons.append(age[keep] if keep < age.size else np.inf)
        helds.append(size[keep - 1] if keep else 0.0)
    return horizons, helds


def lru_exact(events, nbytes: dict | np.ndarray, cache_threads: int, cache_bytes: float, replicas: int = 1):
    """The service's cache replayed turn by turn (retrieval/history/states.py): any request
    touches its thread's entry (an append to an evicted thread makes an empty one), an ask
    without a state loads it; past either limit the least recently used go, never the one in
    use. `events`: (replica, thread, is_ask) in order. Returns per ask whether it loaded."""
    caches = [OrderedDict() for _ in range(replicas)]
    totals = [0.0] * replicas
    loaded = []
    for replica, thread, is_ask in events:
        cache = caches[replica]
        size = cache.pop(thread, 0.0)
        if is_ask:
            loaded.append(size == 0.0)
            totals[replica] += nbytes[thread] - size
            size = nbytes[thread]
        cache[thread] = size
        while len(cache) > cache_threads or totals[replica] > cache_bytes:
            victim = next(iter(cache))
            if victim == thread:
                break
            totals[replica] -= cache.pop(victim)
    return np.array(loaded)


# -- the routing_load.md run, as the model sees it ------------------------------------------------
def routing_run(args: dict, seed: int = 1) -> tuple[list[int], list[list[float]]]:
    """The run's thread sizes and each bot's turn times, drawn from the same random streams as
    service_bots.prefill and service_bots.bot (the request latencies, which delay a bot's next
    turn, left out)."""
    from semhist.indexers.loader import load

    rng = random.Random(0)
    low, high = args["min_messages"], args["max_messages"]
    sizes = [int(math.exp(rng.uniform(math.log(low), math.log(high)))) for _ in range(args["bots"])]
    threads = load(data_file("locomo.jsonl")).threads
    n_texts = len([m for t in threads for m in t.messages if m.role != "system"][:5000])
    n_questions = len([q for t in threads for q in t.queries if q.has_evidence])
    schedules = []
    for i in range(args["bots"]):
        r, now, turns = random.Random(seed * 1000 + i), 0.0, []
        while True:
            now += r.expovariate(1 / args["pace"])
            if now >= args["duration"]:
                break
            turns.append(now)
            r.random(), r.choice(range(n_texts)), r.choice(range(n_questions)), r.choice(range(n_texts))
        schedules.append(turns)
    return sizes, schedules


def routing_events(schedules: list[list[float]], balance: str, replicas: int, assign: np.ndarray,
                   seed: int = 0) -> list:
    """(replica, thread, is_ask) of every request in time order: a turn is append, context,
    append; hashing sends a thread's requests to its replica; round robin deals each request to
    the next replica in HAProxy's order, which the concurrent bots' requests interleave, so a
    request's replica is taken at random (dealt strictly, every context request of a turn would
    land on the same replica)."""
    turns = sorted((t, bot) for bot, ts in enumerate(schedules) for t in ts)
    rng = np.random.default_rng(seed)
    out = []
    for _, bot in turns:
        for is_ask in (False, True, False):
            replica = int(assign[bot]) if balance == "hash" else int(rng.integers(replicas))
            out.append((replica, bot, is_ask))
    return out
