"""What one long message or request costs: resident memory growth and time of `History.add`
and `History.ask`, each size in a fresh process, chunked embedding (the default) against the
whole text in one piece (what semhist did before), and PII masking throughput.

    python benchmarks/big_inputs.py            # writes benchmarks/big_inputs.{json,md}
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

from common import add_out, out_file, write_json

CASE = r"""
import json, resource, sys, time
import semhist.indexers.embed as embed
from semhist.kernel.settings import Settings
from semhist.history import History

size, lang, whole = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "whole"
if whole:
    embed.CHUNK_CHARS = 10**9  # the whole text in one piece
rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
h = History(Settings.load(env={}, data_dir=sys.argv[4], cache_dir=sys.argv[4], max_message_chars=size + 10))
h.add("t", "user", "warm up"); h.ask("t", "warm up")
base = rss()
unit = "今日はラーメンを食べに行きました。とても美味しかったです。" if lang == "ja" else "We met the Lisbon team about the office move and the budget. "
text = (unit * (size // len(unit) + 1))[:size]
t = time.perf_counter(); h.add("t", "user", text); add_s = time.perf_counter() - t
add_mb = rss() - base
t = time.perf_counter(); h.ask("t", text[: min(size, 1_000_000)]); ask_s = time.perf_counter() - t
print(json.dumps({"chars": size, "lang": lang, "embedding": "whole" if whole else "chunked",
                  "add_s": round(add_s, 2), "add_rss_mb": add_mb, "ask_s": round(ask_s, 2),
                  "rss_growth_mb": rss() - base}))
"""

PII = r"""
import json, time
from semhist.indexers.pii import Masker
unit = "連絡先は090-1234-5678、メールは taro@example.co.jp です。注文番号 1234-5678-9012, 2024-05-01 10:30. "
text = (unit * (1_000_000 // len(unit) + 1))[:1_000_000]
m = Masker(); m("warm up 03-1234-5678")
t = time.perf_counter(); out = m(text); s = time.perf_counter() - t
print(json.dumps({"pii_chars": len(text), "pii_s": round(s, 2), "masked": out.count("[PHONE]") + out.count("[EMAIL]")}))
"""


def run(code: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="250000,1000000,5000000")
    parser.add_argument("--whole-sizes", default="250000", help="sizes also measured in one piece (costly)")
    add_out(parser)
    args = parser.parse_args()
    rows = []
    for lang in ("ja", "en"):
        for size in [int(s) for s in args.sizes.split(",")]:
            modes = ["chunked"] + (["whole"] if str(size) in args.whole_sizes.split(",") else [])
            for mode in modes:
                with tempfile.TemporaryDirectory() as tmp:
                    rows.append(run(CASE, str(size), lang, mode, tmp))
                print(rows[-1], file=sys.stderr)
    pii = run(PII)
    write_json(out_file(args.out, "big_inputs.json"), {"cases": rows, "pii": pii})
    lines = ["# One long message: memory and time", "",
             "`python benchmarks/big_inputs.py`; each row a fresh process (History on SQLite, USE-m3, 2 cores);",
             "growth of peak resident memory after a warm-up; the ask sends (up to 1,000,000 characters of)",
             "the same text as the request. `whole`: the embedding in one piece, as before chunking (the",
             "other bounds, on search terms and request analysis, still on).", "",
             "| language | characters | embedding | add (s) | memory after add (MB) | ask (s) | memory growth (MB) |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['lang']} | {r['chars']:,} | {r['embedding']} | {r['add_s']} | {r['add_rss_mb']} | {r['ask_s']} | "
              f"{r['rss_growth_mb']} |" for r in rows]
    lines += ["", f"PII masking (every default rule): {pii['pii_chars']:,} characters in {pii['pii_s']} s, "
                  f"{pii['masked']:,} spans masked."]
    (args.out / "big_inputs.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
