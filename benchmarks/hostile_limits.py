"""Benchmark: what hostile bundles cost ``campaign-bot check`` -- peak memory for one large
receipt, and findings/report size for a manifest of many broken lines.

Each case runs ``campaign-bot check --json DIR`` in a child process; peak RSS is the child's
``VmHWM`` polled from ``/proc/PID/status`` every 2 ms (as benchmarks/verify.py does).

* ``receipt-N-MiB``: a bag whose one receipt is N MiB of compact JSON (many measured
  requests), checked with the default limits (the receipt is over the 8 MiB document cap: a
  P1 ``FILE_TOO_LARGE`` finding, not parsed) and with ``--max-document-bytes`` raised so it
  is parsed (what the default used to allow up to 64 MiB).
* ``manifest-N-lines``: a bag whose payload manifest has N malformed lines appended; the
  table gives the number of findings and the size of the ``--json`` report.

Usage::

    .venv/bin/python benchmarks/hostile_limits.py [--dir /tmp/cb-hostile] [--mib 63]
        [--lines 200000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from _evidence_factory import receipt  # noqa: E402

from benchmarks.child_measure import wait_polling  # noqa: E402
from evidence.manifest import write_bag  # noqa: E402

MIB = 1 << 20


def big_receipt_bag(root: Path, mib: int) -> None:
    r = json.loads(receipt("control", 0, 10.0, screen="s1").model_dump_json(by_alias=True))
    req = r["requests"][-1]
    n = (mib * MIB - 4096) // (len(json.dumps(req)) + 2)  # ", " between requests
    r["requests"] += [{**req, "index": req["index"] + 1 + i} for i in range(n)]
    (root / "data" / "receipts").mkdir(parents=True)
    (root / "data" / "receipts" / "r.json").write_text(json.dumps(r))
    write_bag(root)


def bad_manifest_bag(root: Path, lines: int) -> None:
    (root / "data").mkdir(parents=True)
    (root / "data" / "x.json").write_text("{}\n")
    write_bag(root)
    with open(root / "manifest-sha256.txt", "a") as fh:
        fh.write("not a manifest line\n" * lines)


def run_check(d: Path, *args: str) -> tuple[float, float, int, int, int]:
    """(wall s, peak RSS MB, exit code, findings, --json bytes) of one check."""
    cmd = [sys.executable, "-c", "from evidence.cli import main; main()", "check", str(d),
           "--json", *args]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out_file:
        proc = subprocess.Popen(cmd, stdout=out_file, stderr=subprocess.DEVNULL, cwd=ROOT)
        peak, code, _cpu = wait_polling([proc.pid])
        wall = time.perf_counter() - t0
        out_file.seek(0)
        out = out_file.read()
    findings = len(json.loads(out)["findings"]) if out else -1
    return wall, peak, code, findings, len(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/cb-hostile"))
    ap.add_argument("--mib", type=int, default=63)
    ap.add_argument("--lines", type=int, default=200_000)
    a = ap.parse_args()
    console = Console(width=120)
    shutil.rmtree(a.dir, ignore_errors=True)
    rec, man = a.dir / f"receipt-{a.mib}-MiB", a.dir / f"manifest-{a.lines}-lines"
    console.print(f"building {rec} and {man}")
    big_receipt_bag(rec, a.mib)
    bad_manifest_bag(man, a.lines)
    t = Table(title="campaign-bot check on hostile bundles")
    for c in ("bundle", "limits", "exit", "findings", "--json bytes", "wall s", "peak RSS MB"):
        t.add_column(c, justify="left" if c in ("bundle", "limits") else "right")
    for d, label, args in ((rec, "defaults (8 MiB document cap)", ()),
                           (rec, "--max-document-bytes 64 MiB", ("--max-document-bytes",
                                                                 str(64 * MIB))),
                           (man, "defaults", ())):
        wall, rss, code, n, size = run_check(d, *args)
        t.add_row(d.name, label, str(code), str(n), f"{size:,}", f"{wall:.2f}", f"{rss:.0f}")
    console.print(t)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
