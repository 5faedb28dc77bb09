"""Where a cold (first-in-process) LPIPS comparison spends its time: torch import, model
load (authentication included), and the first and second compare() on the benchmark pair.

Usage: python benchmarks/media_cold.py A.mp4 B.mp4 WEIGHTS SHA256 DEVICE
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    """Print the phase timings as one line."""
    a, b, w, sha, dev = sys.argv[1:6]
    t0 = time.perf_counter()
    import torch

    t1 = time.perf_counter()
    from evidence.media import compare
    from evidence.media.lpips_gate import LpipsScorer

    LpipsScorer(Path(w), sha, dev)
    if dev.startswith("cuda"):
        torch.cuda.synchronize()
    t2 = time.perf_counter()
    walls = []
    for _ in range(2):
        t = time.perf_counter()
        compare(Path(a), Path(b), mode="lossy", device=dev, expected_frames=362,
                lpips_weights=Path(w), lpips_sha256=sha)
        walls.append(time.perf_counter() - t)
    print(f"import torch {t1 - t0:.2f} s, first model load + device start {t2 - t1:.2f} s, "
          f"compare #1 {walls[0]:.2f} s, compare #2 {walls[1]:.2f} s, "
          f"cudnn.benchmark={torch.backends.cudnn.benchmark}")


if __name__ == "__main__":
    main()
