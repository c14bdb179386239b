"""The tables of benchmarks/capacity.md (capacity.py's part; no main): the measured figures,
the sizing for 10k, 100k and 1M active conversations, the assumptions, and the model against
the routing_load.md run."""

from __future__ import annotations

import os

from capacity_model import CLASSES, DAYS, GRID_S, TURN_GAP_S, TURNS_PER_SESSION, WEEKEND
from capacity_sizing import CACHE_STEPS, GB_PER_CORE, HEADROOM, MIN_REPLICAS, MONTHS, simulate
from common import HERE, read_json, table


def simulate_and_report(measured: dict, replay_threads: int, seed: int) -> tuple[dict, str]:
    run = read_json(HERE / "routing_load.json", None)
    result = simulate(measured, replay_threads, seed, run)
    return result, render(measured, result)


def _mb(b: float) -> str:
    return f"{b / 2**20:,.1f}"


def measured_tables(m: dict) -> list[str]:
    lines = ["## Measured", ""]
    if m.get("pg_skipped"):
        lines += ["PostgreSQL: skipped (no `--pg` URL given); the sizing reads SQLite's figures.", ""]
    lines += ["Bytes per message at rest (the store after "
              f"{next(iter(m['backends'].values()))['disk']['messages']:,} Teams-shaped messages in "
              "threads that took turns; FAISS files: the same threads past `view_limit`):", ""]
    rows = []
    for name, b in m["backends"].items():
        d = b["disk"]
        tables = ", ".join(f"{t} {v:,}" for t, v in d.get("tables", {}).items())
        rows.append([name, f"{d['store_bytes_per_message']:,}", f"{d['faiss_flat_bytes_per_message']:,.0f}",
                     f"{d['faiss_hnsw_bytes_per_message']:,.0f}", tables or "(one file)"])
    lines += table(["store", "store bytes/message", "FAISS flat", "FAISS HNSW", "by table"], rows)
    lines += ["", "A cached thread's state by length (`Entry.nbytes`; the same state on both stores; "
              "\"vectors\" is the state of a thread past `view_limit`, measured by lowering it), what its first "
              "load grew the process by, and what loading it costs over a warm ask:", ""]
    for name, b in m["backends"].items():
        mem = b["memory"]
        rows = []
        for n, v in sorted(((int(k), v) for k, v in mem.items() if isinstance(v, dict)), key=lambda x: x[0]):
            w, vec = v.get("whole"), v["vectors"]
            rows.append([f"{n:,}", _mb(w["nbytes"]) if w else "", f"{w['nbytes'] / n:,.0f}" if w else "",
                         w["anon_growth_first_load_mb"] if w else "", w["load_cpu_ms"] if w else "",
                         w["load_wall_ms"] if w else "", _mb(vec["nbytes"]), vec["load_cpu_ms"]])
        lines += [f"{name} (process at rest with the embedder loaded: {mem['rss_baseline_mb']:,} MB resident):", ""]
        lines += table(["messages", "whole state MB", "bytes/message", "first load: anon MB", "load CPU ms",
                        "load wall ms", "vectors state MB", "vectors load CPU ms"], rows) + [""]
    lines += _ops_table(m) + [""] + _statements_table(m)
    return lines


def _ops_table(m: dict) -> list[str]:
    rows = []
    for name, b in m["backends"].items():
        o = b["operations"]
        aw, kw, km = o["appends_warm"], o["asks_warm"], o["asks_after_miss"]
        pa, pk = aw.get("pg_cpu_ms_per_op") or 0.0, kw.get("pg_cpu_ms_per_op") or 0.0
        rows.append([name, f"{aw['append_cpu_ms']} / {aw['append_wall_ms']}", pa or "-",
                     f"{1000 / (aw['append_cpu_ms'] + pa):.0f}", f"{kw['ask_cpu_ms']} / {kw['ask_wall_ms']}", pk or "-",
                     f"{1000 / (kw['ask_cpu_ms'] + pk):.0f}",
                     f"{km['ask_cpu_ms']} / {km['ask_wall_ms']} ({km['thread_messages_after']:,} messages)"])
    o = next(iter(m["backends"].values()))["operations"]
    return ([f"Per operation, one process, sequential, on a warm thread of {o['thread_messages']:,} messages "
             f"growing by the turns ({o['appends_warm']['appends']:,} appends, {o['asks_warm']['asks']:,} asks; "
             "budget 2,000 tokens, local keyword; ms are medians; \"per core\" counts semhist's and PostgreSQL's "
             "CPU together):", ""]
            + table(["store", "append CPU / wall ms", "PostgreSQL CPU ms", "appends/s per core",
                     "ask CPU / wall ms", "PostgreSQL CPU ms", "asks/s per core", "ask after a miss CPU / wall ms"],
                    rows))


def _statements_table(m: dict) -> list[str]:
    pg = m["backends"].get("postgresql")
    if not pg:
        return []
    rows = []
    for phase in ("appends_warm", "asks_warm", "appends_after_miss", "asks_after_miss"):
        p = pg["operations"][phase]
        s = p["pg_per_op"]
        rows.append([phase.replace("_", " "), s["statements"], s["select_calls"], s["insert_calls"], s["update_calls"],
                     s["delete_calls"], s["other_calls"], s["rows"], s["pages_touched"], s["pages_dirtied"],
                     f"{s['wal_bytes']:,.0f}", f"{p['store_bytes_per_op']:,.0f}"])
    return (["PostgreSQL statements per operation (pg_stat_statements; \"other\": BEGIN, COMMIT and the like; "
             "pages: shared buffers touched, hit or read; store bytes: what the tables grew by):", ""]
            + table(["operation", "statements", "SELECT", "INSERT", "UPDATE", "DELETE", "other", "rows",
                     "pages touched", "pages dirtied", "WAL bytes", "store bytes"], rows))


def assumptions(s: dict) -> list[str]:
    rp, mix = s["replay"], s["turn_mix"]
    classes = "; ".join(f"{name} {share:.0%} (median {med:g} sessions a week)" for name, share, med, _ in CLASSES)
    p50, p90, p99 = (round(x) for x in rp["length_p50_p90_p99"])
    return ["## The activity model (assumed, not measured)", "",
            f"- {rp['threads']:,} threads (seed {rp['seed']}), each in a class with a lognormal rate of sessions: "
            f"{classes}. {rp['active']:,} of them have a turn in the measured week: the active conversations.",
            f"- A session is a burst of turns (geometric, mean {TURNS_PER_SESSION:g}) about {TURN_GAP_S:g} s apart; "
            "sessions start on a working-hours curve in one time zone (9-12 and 13-17 on weekdays at the top, a "
            f"lunch dip, nights near 2%, weekend hours at {WEEKEND:.0%} of a weekday's).",
            f"- A turn is what the measured Teams turns do: {mix['appends']:g} appends ({mix['messages']:g} messages: "
            "bursts, tool calls and results) and one ask.",
            f"- The deployment has run a year: each thread's stored length is its rate times its age (uniform over "
            f"the year): p50 / p90 / p99 {p50:,} / {p90:,} / {p99:,} messages.",
            f"- {DAYS} days are replayed; the first week fills the caches, the second is measured: "
            f"{rp['turns']:,} turns, {rp['turns_per_s_mean']} turns/s on average, {rp['turns_per_s_peak']} in the "
            "busiest 5 minutes; a size of N active conversations scales these by N / "
            f"{rp['active']:,}.",
            f"- Replicas are one `semhist serve` worker each (one core: one Python process), the thread hashed to "
            f"one of them as docs/samples/haproxy.cfg does, evenly; sized for {HEADROOM:.0%} CPU at the peak, at "
            f"least {MIN_REPLICAS}. Replicas and cache are chosen together, the cheapest pair that carries the peak "
            f"with its thread loads' CPU (caches of {', '.join(map(str, CACHE_STEPS))} threads; up to three times "
            f"the replicas the CPU alone needs), a core costing what {GB_PER_CORE:g} GB of memory cost; "
            "`SEMHIST_CACHE_MB` is what those states held at the fullest in the measured week, plus 25%; a "
            "replica's memory adds the process at rest.",
            f"- The LRU is read every {GRID_S // 60} minutes (capacity_model.py); against the turn-by-turn LRU on "
            "the same turns:", ""]


def sizing_tables(s: dict) -> list[str]:
    rows, pg = [], []
    for z in s["sizes"]:
        p = z["pick"]
        rows.append([f"{z['active']:,}", f"{z['threads']:,}", z["turns_per_s_mean"], z["turns_per_s_peak"],
                     f"{z['replicas']} ({z['replicas_cpu_only']})", f"{p['cache_threads']:,}", f"{z['cache_mb']:,}",
                     round(p["loads_per_ask"], 3), z["cpu_ms_per_turn"], f"{z['replica_ram_mb']:,}", z["faiss_gb"]])
        pg.append([f"{z['active']:,}", f"{z['messages_stored']:,}",
                   " / ".join(f"{z['pg_gb'][mo]:,}" for mo in MONTHS), z["pg_cores"], f"{z['pg_statements_per_s']:,}",
                   f"{z['pg_reads_per_s']:,} / {z['pg_writes_per_s']:,}", z["pg_wal_mb_per_s"],
                   f"{z['pg_commit_iops']:,} + {z['pg_page_write_iops']:,}", f"{z['pg_read_iops']:,}"])
    lines = ["## The sizing", "", "Replicas (one `semhist serve` worker each, one core) and their cache:", ""]
    lines += table(["active conversations", "threads stored", "turns/s mean", "turns/s peak (5 min)",
                    "replicas (for CPU alone, no loads)", "SEMHIST_CACHE_THREADS", "SEMHIST_CACHE_MB",
                    "thread loads per ask", "semhist CPU ms per turn", "memory per replica MB",
                    "FAISS files GB (all replicas)"], rows)
    lines += ["", "PostgreSQL at the same peak (statements: the measured ones per append, per ask and per ask "
              "after a miss; write IOPS: a WAL flush per write transaction, at most, plus the pages the "
              "operations dirtied; read IOPS: one page per message of each thread loaded, the worst case of "
              "rows written turn by turn and nothing cached):", ""]
    lines += table(["active conversations", "messages stored (12 months)",
                    f"GB after {' / '.join(map(str, MONTHS))} months", "cores", "statements/s",
                    "SELECT / writes per s", "WAL MB/s", "write IOPS (flushes + pages)", "read IOPS (worst case)"], pg)
    lines += ["", "Thread loads per ask for each cache size per replica (the replicas above; \"default\": 256 "
              "threads within 1,024 MB, the shipped settings), and the MB those states held at the fullest:", ""]
    cols = [f"{c:,}" for c in CACHE_STEPS] + ["default"]
    rows = []
    for z in s["sizes"]:
        cells = [f"{c['loads_per_ask']:.3f} ({_mb(c['held_bytes_max'])} MB)" for c in z["curve"]]
        rows.append([f"{z['active']:,} ({z['replicas']} replicas)", *cells])
    return lines + table(["active conversations", *cols], rows)


def routing_lines(s: dict) -> list[str]:
    rc = s.get("routing")
    if not rc:
        return ["## The check against the real run", "", "benchmarks/routing_load.json is missing: no check.", ""]
    same = "the same" if rc["messages"] == rc["measured_messages"] else f"not the run's {rc['measured_messages']:,}"
    rows = [[b, c["measured"], c["predicted"], f"{c['min']} – {c['max']}", c["teams_states"], c["first_loads"],
             c["measured_asks"], c["turns_per_s"], c["cpu_ms_per_turn"], c["cores_predicted"]]
            for b, c in rc["cases"].items()]
    return ["## The check against the real run (routing_load.md)", "",
            f"The model replays the run's own configuration: its 1,000 threads ({rc['messages']:,} messages, {same}), "
            f"each bot's turn times drawn from the run's random streams ({rc['turns']:,} turns, "
            f"{rc['threads_asked']:,} "
            "threads asked), three fresh replicas of 256 threads / 1,024 MB, a turn being append, context, append, "
            f"and the measured costs; its threads are LoCoMo without the Teams shape, whose states measured "
            f"{rc['plain_ratio']:g} of the Teams-shaped ones at 1,000 messages (the model with Teams-shaped states "
            "alongside); hashing as 20 random even assignments (min – max shown), round robin as a random replica "
            "per request.", ""] + table(
        ["balance", "measured loads per context request", "model", "model range", "model, Teams-shaped states",
         "of which first loads",
         "context requests (measured)", "turns/s (measured)", "model CPU ms per turn", "model cores at that rate"],
        rows) + [""] + disagreement(rc)


def disagreement(rc: dict) -> list[str]:
    h, rr = rc["cases"]["hash"], rc["cases"]["roundrobin"]
    return [f"Where they disagree, and why. Hashing: the model says {h['predicted']}, the run measured {h['measured']} "
            f"({(h['predicted'] - h['measured']) / h['measured']:+.0%}). {h['first_loads']} loads per request are "
            "first loads (fresh replicas: each thread's first ask reads it); the rest are states pushed out by "
            "the 1,024 MB limit before their thread's next turn, so the answer rides on the state sizes: with "
            f"the Teams-shaped states ({1 / rc['plain_ratio']:.0%} of these) the model says {h['teams_states']}. "
            "The states measured "
            "here are this code's, which may not be the run's; and HAProxy's consistent hash spreads 1,000 "
            "threads less evenly than the model's random even split, which would raise the loads, not lower "
            f"them. Round robin: {rr['predicted']} against {rr['measured']}: every replica reads every thread, "
            "and a replica's cache is filled by the other threads' requests between a thread's turns.", "",
            f"CPU: a warm turn of the run's shape (two appends, one ask) costs {rc['warm_turn_ms']} ms of semhist "
            f"and PostgreSQL CPU by the measured figures, so two cores would carry {rc['warm_turns_per_s_2_cores']} "
            "turns/s with nothing else on them; with the run's loads, the model's last column is the cores "
            f"the run needed for semhist and PostgreSQL alone: {h['cores_predicted']} hashing, {rr['cores_predicted']} "
            "round robin, on the 2 cores the run saturated. Where that comes near or past 2, the loads cost "
            "more here than in the run: this code answers an evicted thread's ask from a candidate view and "
            "reads the whole thread in the background, and the figures count both. HTTP and JSON in the "
            "service, the 1,000 bots and HAProxy took the rest of the machine; they are not in the figures, so "
            "the cores of the sizing count semhist's own work and the headroom has to cover the service's.", ""]


def render(m: dict, s: dict) -> str:
    lines = ["# Capacity model (`python benchmarks/capacity.py`)", "",
             f"`python benchmarks/capacity.py measure --pg postgresql://...` then `simulate` (seed "
             f"{s['replay']['seed']}, {s['replay']['threads']:,} threads). Machine: {os.cpu_count()} cores, shared; "
             "the figures are CPU time where a shared machine would blur wall time. The sizing reads "
             f"{s['figures']['backend']}'s figures.", ""]
    lines += measured_tables(m) + [""] + assumptions(s)
    lines += table(["cache threads", "cache MB", "threads", "asks", "grid", "turn by turn"],
                   [[g["cache_threads"], g["cache_mb"] or "-", f"{g['threads']:,}", f"{g['asks']:,}", g["grid"],
                     g["exact"]] for g in s["grid_vs_exact"]])
    lines += [""] + sizing_tables(s) + [""] + routing_lines(s)
    return "\n".join(lines) + "\n"
