"""The sizing of benchmarks/capacity.py (its part; no main): the measured figures as the model
reads them, a deployment sized for N active conversations, and the model's prediction of the
routing_load.md run."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from capacity_model import (WEEK, Replay, active, lru_exact, lru_grid, peak_rate, routing_events, routing_run,
                            turn_mix)

HEADROOM = 0.6  # plan for 60% CPU at the busiest 5 minutes: bursts, uneven hashing, a replica down
MIN_REPLICAS = 2  # one can restart while the other serves
CACHE_STEPS = (256, 1024, 4096, 16384, 65536)
GB_PER_CORE = 4.0  # what a core costs in memory, as general-purpose cloud machines are priced
MONTHS = (12, 36)  # PostgreSQL size after this long


@dataclass
class Figures:
    backend: str
    view_limit: int
    whole: np.ndarray  # polyfit (bytes per message, bytes) of a whole thread's state
    vectors: np.ndarray  # ... of a long thread's state (its FAISS index and the closed messages read)
    load_whole: np.ndarray  # polyfit (CPU ms per message, ms) of loading a whole state
    load_vectors: np.ndarray
    append_ms: float  # CPU of the semhist process per append (one to three messages)
    ask_ms: float
    pg_append_ms: float  # PostgreSQL's CPU per operation (0 on SQLite)
    pg_ask_ms: float
    pg_load_ms_per_msg: float  # PostgreSQL's CPU per message of a thread loaded
    stmts: dict  # statements per operation by phase
    pages_load_per_msg: float  # buffer pages touched per message of a thread loaded
    bytes_per_msg: float  # the store at rest
    faiss_per_msg: float  # a long thread's FAISS file (flat; HNSW past ann_threshold)
    turn_log_per_ask: float
    rss_baseline_mb: float

    def nbytes(self, n: np.ndarray) -> np.ndarray:
        return np.where(n <= self.view_limit, np.polyval(self.whole, n), np.polyval(self.vectors, n))

    def load_ms(self, n: np.ndarray) -> np.ndarray:
        return np.maximum(np.where(n <= self.view_limit, np.polyval(self.load_whole, n),
                                   np.polyval(self.load_vectors, n)), 0.0)

    def turn_ms(self, mix: dict, loads: float = 0.0, load_ms: float = 0.0) -> tuple[float, float]:
        """(semhist, PostgreSQL) CPU ms of one turn, `loads` thread loads per ask of `load_ms` each."""
        app = mix["appends"] * self.append_ms + self.ask_ms + loads * load_ms
        return app, mix["appends"] * self.pg_append_ms + self.pg_ask_ms


def figures(measured: dict) -> Figures:
    backends = measured["backends"]
    name = "postgresql" if "postgresql" in backends else "sqlite"
    b = backends[name]
    mem, ops = b["memory"], b["operations"]
    rows = {k: v for k, v in mem.items() if isinstance(v, dict)}

    def fit(kind: str, field: str) -> np.ndarray:
        pts = sorted((int(k), max(v[kind][field], 0.0)) for k, v in rows.items() if kind in v)
        return np.polyfit([p[0] for p in pts], [p[1] for p in pts], 1) if len(pts) > 1 else np.array([0.0, pts[0][1]])

    pg = name == "postgresql"
    warm, miss = ops["asks_warm"], ops["asks_after_miss"]
    loaded = miss["thread_messages_after"]
    stmts = {k: ops[k].get("pg_per_op", {}) for k in ("appends_warm", "asks_warm", "appends_after_miss",
                                                      "asks_after_miss")}
    return Figures(
        backend=name, view_limit=mem["view_limit"], whole=fit("whole", "nbytes"), vectors=fit("vectors", "nbytes"),
        load_whole=fit("whole", "load_cpu_ms"), load_vectors=fit("vectors", "load_cpu_ms"),
        append_ms=ops["appends_warm"]["append_cpu_ms"], ask_ms=warm["ask_cpu_ms"],
        pg_append_ms=ops["appends_warm"].get("pg_cpu_ms_per_op") or 0.0, pg_ask_ms=warm.get("pg_cpu_ms_per_op") or 0.0,
        pg_load_ms_per_msg=max((miss.get("pg_cpu_ms_per_op") or 0.0) - (warm.get("pg_cpu_ms_per_op") or 0.0),
                               0) / loaded,
        stmts=stmts, pages_load_per_msg=max(stmts["asks_after_miss"].get("pages_touched", 0)
                                            - stmts["asks_warm"].get("pages_touched", 0), 0) / loaded,
        bytes_per_msg=b["disk"]["store_bytes_per_message"], faiss_per_msg=b["disk"]["faiss_flat_bytes_per_message"],
        turn_log_per_ask=(warm.get("store_bytes_per_op") or 0.0) if pg else 0.0,
        rss_baseline_mb=mem["rss_baseline_mb"])


# -- one replica's cache -----------------------------------------------------------------------
def replica_share(r: Replay, fig: Figures, share: float, configs: list[tuple[int, float]], seed: int) -> list[dict]:
    """The cache of one replica holding `share` of the replay's threads (hashing spreads threads
    evenly: the replica sees its threads' every turn). Past 1, the replay's threads stand for
    `share` times as many: the caches are divided by `share` (an LRU whose threads and cache grow
    together keeps its hit rate), and the bytes it holds are multiplied back."""
    rng = np.random.default_rng(seed)
    scale = max(share, 1.0)
    mine = rng.random(r.rate.size) < share / scale
    sel = mine[r.thread]
    ids, local = np.unique(r.thread[sel], return_inverse=True)
    length = r.length[ids]
    nb = fig.nbytes(length)
    scaled = [(max(1, round(c / scale)), b / scale) for c, b in configs]
    out = lru_grid(r.time[sel], local, nb, scaled)
    measured = r.time[sel] >= WEEK
    for res, (c, b) in zip(out, configs):
        missed = local[~res.pop("hit") & measured]
        res.update(cache_threads=c, cache_bytes=b, held_bytes_max=res["held_bytes_max"] * scale,
                   load_ms=float(fig.load_ms(length[missed]).mean()) if missed.size else 0.0,
                   load_msgs=float(length[missed].mean()) if missed.size else 0.0, asks=int(measured.sum()))
    return out


def replicas_for(peak: float, turn_ms: float) -> int:
    return max(MIN_REPLICAS, math.ceil(peak * turn_ms / 1000 / HEADROOM))


def ram_mb(fig: Figures, held_bytes: float) -> float:
    """A replica's memory: the process at rest and its cache (25% over what it held at the fullest)."""
    return fig.rss_baseline_mb + held_bytes * 1.25 / 2**20


def size_for(r: Replay, act: int, fig: Figures, n_active: int, seed: int) -> dict:
    """The cheapest (replicas, cache) that carries the peak at HEADROOM, a core costing what
    GB_PER_CORE GB of memory cost: more replicas each hold fewer threads, so a small cache
    misses less; a big cache saves the CPU of thread loads but costs memory."""
    mix = turn_mix()
    f = n_active / act  # deployment threads per replay thread
    mean, peak = (x * f for x in peak_rate(r.time))
    first = replicas_for(peak, fig.turn_ms(mix)[0])
    configs = [(c, np.inf) for c in CACHE_STEPS] + [(256, 1024 * 2**20)]
    options, curves = [], {}
    for replicas in sorted({first, math.ceil(first * 1.5), first * 2, first * 3}):
        curves[replicas] = replica_share(r, fig, f / replicas, configs, seed)
        for c in curves[replicas]:
            need = replicas_for(peak, fig.turn_ms(mix, c["loads_per_ask"], c["load_ms"])[0])
            if need <= replicas and c["cache_bytes"] == np.inf:
                options.append((replicas * (1 + ram_mb(fig, c["held_bytes_max"]) / 1024 / GB_PER_CORE), replicas, c))
    if not options:  # even three times the CPU need does not carry the loads: the biggest, said so
        replicas = max(curves)
        options = [(0.0, replicas, [c for c in curves[replicas] if c["cache_bytes"] == np.inf][-1])]
    _, replicas, pick = min(options, key=lambda o: o[0])
    return {"active": n_active, "threads": round(r.rate.size * f), "turns_per_s_mean": round(mean, 2),
            "turns_per_s_peak": round(peak, 2), "replicas": replicas, "replicas_cpu_only": first,
            "curve": curves[replicas], "pick": pick, "feasible": bool(options[0][0]),
            "cache_mb": int(math.ceil(pick["held_bytes_max"] * 1.25 / 2**20 / 64) * 64),
            "replica_ram_mb": round(ram_mb(fig, pick["held_bytes_max"])),
            "cpu_ms_per_turn": round(fig.turn_ms(mix, pick["loads_per_ask"], pick["load_ms"])[0], 1),
            **postgres(r, fig, f, peak, pick, mix)}


def postgres(r: Replay, fig: Figures, f: float, peak: float, pick: dict, mix: dict) -> dict:
    """CPU, statements and I/O at the peak, and the size after MONTHS of the replay's activity."""
    loads = pick["loads_per_ask"]
    s = fig.stmts
    stmt = lambda phase, key: s.get(phase, {}).get(key, 0.0)  # noqa: E731
    per_turn = {key: mix["appends"] * stmt("appends_warm", key) + stmt("asks_warm", key)
                + loads * (stmt("asks_after_miss", key) - stmt("asks_warm", key))
                for key in ("statements", "select_calls", "writes", "pages_dirtied", "wal_bytes")}
    pg_ms = fig.turn_ms(mix)[1] + loads * pick["load_msgs"] * fig.pg_load_ms_per_msg
    weekly_turns = (r.time >= WEEK).sum() * f
    stored_now = r.length.sum() * f  # the replay's threads after a year (capacity_model.AGE_WEEKS)
    size = {m: (stored_now + weekly_turns * mix["messages"] * (m - 12) * 52 / 12) * fig.bytes_per_msg
            + weekly_turns * m * 52 / 12 * fig.turn_log_per_ask for m in MONTHS}
    long_threads = r.length > fig.view_limit
    return {"pg_cores": round(peak * pg_ms / 1000 / HEADROOM, 2),
            "pg_statements_per_s": round(peak * per_turn["statements"]),
            "pg_reads_per_s": round(peak * per_turn["select_calls"]),
            "pg_writes_per_s": round(peak * per_turn["writes"]),
            "pg_commit_iops": round(peak * (mix["appends"] + 1)),  # one WAL flush per write transaction, at most
            "pg_page_write_iops": round(peak * per_turn["pages_dirtied"]),
            # a thread's rows were written turn by turn among other threads': one heap page per message
            # loaded, when neither PostgreSQL's buffers nor the OS cache hold it
            "pg_read_iops": round(peak * loads * pick["load_msgs"]),
            "pg_wal_mb_per_s": round(peak * per_turn["wal_bytes"] / 2**20, 2),
            "messages_stored": round(stored_now), "pg_gb": {m: round(v / 1e9, 1) for m, v in size.items()},
            "faiss_gb": round(r.length[long_threads].sum() * f * fig.faiss_per_msg / 1e9, 1)}


def grid_vs_exact(r: Replay, fig: Figures, share: float, seed: int) -> list[dict]:
    """The grid LRU against the OrderedDict one on the same replica's turns."""
    rng = np.random.default_rng(seed)
    sel = (rng.random(r.rate.size) < share)[r.thread]
    ids, local = np.unique(r.thread[sel], return_inverse=True)
    nb = fig.nbytes(r.length[ids])
    configs = [(256, np.inf), (1024, np.inf), (256, 1024 * 2**20), (4096, np.inf)]
    grid = lru_grid(r.time[sel], local, nb, configs)
    measured = r.time[sel] >= WEEK
    out = []
    for (c, b), g in zip(configs, grid):
        exact = lru_exact([(0, int(t), True) for t in local], nb, c, b)
        out.append({"cache_threads": c, "cache_mb": None if b == np.inf else round(b / 2**20),
                    "threads": int(ids.size), "asks": int(measured.sum()),
                    "grid": round(g["loads_per_ask"], 4), "exact": round(float(exact[measured].mean()), 4)})
    return out


# -- the routing_load.md run -----------------------------------------------------------------------
def routing_check(fig: Figures, run: dict, plain_ratio: float, seeds: int = 20) -> dict:
    """The model's loads per context request for the run's own threads and arrival times, three
    replicas, 256 threads / 1024 MB each; hashing as uniformly random assignments (HAProxy's
    consistent hash is not reproduced), round robin as a random replica per request. The run's
    threads are LoCoMo without the Teams shape: their states are `plain_ratio` of the fit's."""
    args = run["args"]
    sizes, schedules = routing_run(args)
    turns = [len(s) for s in schedules]
    teams = fig.nbytes(np.array(sizes) + 1.5 * np.array(turns))  # the run's appends grow each thread a little
    warm = sum(fig.turn_ms({"appends": 2.0}))
    out = {"messages": int(sum(sizes)), "measured_messages": run["messages_prefilled"], "turns": int(sum(turns)),
           "warm_turn_ms": round(warm, 1), "warm_turns_per_s_2_cores": round(2000 / warm, 1),
           "threads_asked": int(sum(1 for t in turns if t)), "plain_ratio": round(plain_ratio, 3), "cases": {}}
    measured = {c["balance"]: c for c in run["cases"]}
    for balance in ("hash", "roundrobin"):
        values, first, shaped = [], [], []
        for seed in range(seeds):
            assign = np.random.default_rng(seed).integers(0, 3, len(sizes))
            events = routing_events(schedules, balance, 3, assign, seed)
            loaded = lru_exact(events, teams * plain_ratio, 256, 1024 * 2**20, replicas=3)
            values.append(float(loaded.mean()))
            shaped.append(float(lru_exact(events, teams, 256, 1024 * 2**20, replicas=3).mean()))
            first.append(len({(rep, t) for rep, t, ask in events if ask}) / loaded.size)
        m = measured.get(balance, {})
        loads = float(np.mean(values))
        app_ms, pg_ms = fig.turn_ms({"appends": 2.0}, loads, float(fig.load_ms(np.array(sizes)).mean()))
        pg_ms += loads * float(np.mean(sizes)) * fig.pg_load_ms_per_msg
        rate = m.get("turns_per_s", 0.0)
        out["cases"][balance] = {
            "predicted": round(loads, 3), "min": round(min(values), 3), "max": round(max(values), 3),
            "teams_states": round(float(np.mean(shaped)), 3),
            "first_loads": round(float(np.mean(first)), 3), "measured": m.get("loads_per_ask"),
            "measured_asks": m.get("context_requests"), "turns_per_s": rate,
            "cores_predicted": round(rate * (app_ms + pg_ms) / 1000, 2), "cpu_ms_per_turn": round(app_ms + pg_ms, 1)}
    return out


def simulate(measured: dict, replay_threads: int, seed: int, run: dict | None,
             sizes: tuple[int, ...] = (10_000, 100_000, 1_000_000)) -> dict:
    from capacity_model import replay

    fig = figures(measured)
    r = replay(replay_threads, seed)
    act = active(r).size
    mean, peak = peak_rate(r.time)
    out = {"figures": {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in vars(fig).items()},
           "turn_mix": turn_mix(), "replay": {"threads": replay_threads, "seed": seed, "active": int(act),
                                              "turns": int(r.time.size), "turns_per_s_mean": round(mean, 3),
                                              "turns_per_s_peak": round(peak, 3),
                                              "length_p50_p90_p99": np.percentile(r.length, [50, 90, 99]).tolist()},
           "sizes": [size_for(r, act, fig, n, seed) for n in sizes]}
    out["grid_vs_exact"] = grid_vs_exact(r, fig, min(1.0, 20_000 / r.rate.size), seed)
    mem = measured["backends"][fig.backend]["memory"]
    ratio = mem.get("plain_1000_nbytes", 0) / float(fig.nbytes(np.array([1000]))[0]) or 1.0
    out["routing"] = routing_check(fig, run, ratio) if run else None
    return out
