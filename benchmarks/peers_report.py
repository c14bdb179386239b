"""The report of benchmarks/peers.py: its tables, the paragraph of what they say, and the plot.
A module of that script, not a script: it is run through peers.py."""

from __future__ import annotations

from pathlib import Path

from common import out_file, write_json

BUDGETS = ("10%", "25%")
METHODS = ("lc-trim", "lc-vector", "lc-vector-named", "li-memory", "li-memory-q1", "af-window", "af-budget", "semhist")
PEERS = ("lc-trim", "lc-vector", "lc-vector-named", "li-memory", "af-window", "af-budget")  # li-memory-q1: a diagnostic
LABELS = {"lc-trim": "LangChain trim_messages", "lc-vector": "LangChain InMemoryVectorStore top-k",
          "lc-vector-named": "LangChain InMemoryVectorStore top-k, speaker in the document",
          "li-memory": "LlamaIndex Memory + VectorMemoryBlock", "li-memory-q1": "(diagnostic) li-memory, request-only query",
          "af-window": "Agent Framework InMemoryHistoryProvider + SlidingWindowStrategy",
          "af-budget": "Agent Framework InMemoryHistoryProvider + TokenBudgetComposedStrategy",
          "semhist": "semhist blocks"}
COLUMNS = ("evidence_recall", "all_evidence_rate", "mean_prompt_tokens", "token_ratio", "write_p50_ms",
           "write_p95_ms", "query_p50_ms", "query_p95_ms", "over_budget", "n_queries")
KNOWN = {("LoCoMo", "lc-vector"): (0.61, 0.78), ("LoCoMo", "lc-vector-named"): (0.61, 0.78),
         ("LoCoMo", "li-memory"): (0.14, 0.26), ("JMultiWOZ", "lc-vector"): (0.30, 0.41),
         ("JMultiWOZ", "lc-vector-named"): (0.30, 0.41), ("JMultiWOZ", "li-memory"): (0.18, 0.33)}
NOTES = "<!-- NOTES: written by hand, kept by benchmarks/peers.py -->"
LOWER = ("write_p50_ms", "write_p95_ms", "query_p50_ms", "query_p95_ms")


def both(row: dict, c: str) -> str:
    return " / ".join(str(row[b][c]) for b in BUDGETS)


def paragraph(name: str, data: dict) -> str:
    """What the numbers say: semhist against the best shipped peer, where it loses, the known figures."""
    ms, ours, li = data["methods"], data["methods"]["semhist"], data["methods"]["li-memory"]
    best = {b: max(PEERS, key=lambda m: ms[m][b]["evidence_recall"]) for b in BUDGETS}
    lost = [f"{c} (semhist {both(ours, c)}): " + ", ".join(f"{m} {both(ms[m], c)}" for m in beat)
            for c in ("evidence_recall", "all_evidence_rate", *LOWER)
            if (beat := [m for m in PEERS if any((ms[m][b][c] - ours[b][c]) * (-1 if c in LOWER else 1) > 0
                                                 for b in BUDGETS)])]
    known = [f"{m} {k[0]} / {k[1]} -> {both(ms[m], 'evidence_recall')}, " + ("reproduced" if all(
        abs(ms[m][b]["evidence_recall"] - v) <= 0.05 for b, v in zip(BUDGETS, k)) else "refuted")
        for (ds, m), k in KNOWN.items() if ds == name]
    return (f"**What the numbers say** ({' / '.join(BUDGETS)}): semhist's evidence recall {both(ours, 'evidence_recall')}"
            f", all-evidence rate {both(ours, 'all_evidence_rate')}; the best shipped peer's recall "
            + ", ".join(f"{ms[best[b]][b]['evidence_recall']} ({best[b]}, {b})" for b in BUDGETS)
            + ". Where a peer beats semhist: " + ("; ".join(lost) or "nowhere") + ". li-memory: prompts holding "
            f"retrieved batches {both(li, 'with_retrieved_batches')} of {li[BUDGETS[0]]['n_queries']}, over the "
            f"budget before the cut {both(li, 'over_budget_raw')} (by " + " / ".join(
                f"{r['tokens_over_raw'] / max(1, r['over_budget_raw']):.0f}" for r in li.values()) + " tokens on "
            f"average), batches stored {both(li, 'batches_stored')}. "
            "Known figures (recall; within 0.05 counts as reproduced): " + "; ".join(known) + ".")


def markdown(results: dict, command: str, how: str) -> str:
    s = results["settings"]
    lines = ["# semhist against LangChain, LlamaIndex and Agent Framework memory", "",
             f"`{command}` ({s['subset']}): {s['wall_s']} s on {s['cores']} cores, langchain-core "
             f"{s['versions']['langchain_core']}, llama-index-core {s['versions']['llama_index']}, agent-framework-core "
             f"{s['versions'].get('agent_framework', '-')}. Every method: "
             f"embedder {s['embedder']}, semhist's token counter (every figure is counted by it) and the hard budget "
             "`semhist eval --budget` gives, a share of the thread's full-history tokens. Write = adding one message "
             "to the memory, query = request to prompt (ms). How each method is run: at the end.", ""]
    for name, data in results["datasets"].items():
        lines += [f"## {name}: {data['file']}, {data['threads']} threads, {data['messages']} messages, "
                  f"{data['queries']} queries with evidence", "",
                  "| method | budget | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 2) + "|"]
        lines += [f"| {LABELS[m]} | {b} | " + " | ".join(str(row[c]) for c in COLUMNS) + " |"
                  for m in METHODS for b, row in data["methods"][m].items()]
        lines += ["", paragraph(name, data), "", f"Wall time per method (s): {data['wall_s']}.", ""]
    lines += ["## How each method is run", "", how, ""]
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = results["datasets"]
    fig, axes = plt.subplots(1, len(datasets), figsize=(6.5 * len(datasets), 4.5), squeeze=False)
    for ax, (name, data) in zip(axes[0], datasets.items()):
        for m in METHODS:
            rows = data["methods"][m]
            ax.plot([r["mean_prompt_tokens"] for r in rows.values()], [r["evidence_recall"] for r in rows.values()],
                    marker="o", label=LABELS[m], linewidth=2.5 if m == "semhist" else 1.2,
                    linestyle=":" if m not in PEERS + ("semhist",) else "-")
        ax.set(title=f"{name}: budgets {' and '.join(BUDGETS)}, one embedder and token counter", xlabel="mean prompt tokens",
               ylabel="evidence recall", ylim=(0, 1.02))
        ax.grid(alpha=0.3)
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=8)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=110)


def write(results: dict, out_dir: Path, command: str, how: str) -> None:
    """peers.json, peers.md (the hand-written notes after NOTES kept) and peers.png."""
    write_json(out_file(out_dir, "peers.json"), results)
    md = out_dir / "peers.md"
    notes = md.read_text(encoding="utf-8").partition(NOTES)[2] if md.exists() else ""
    md.write_text(markdown(results, command, how) + "\n" + NOTES + notes, encoding="utf-8")
    plot(results, out_dir / "peers.png")
