"""LPIPS on an accelerator against the CPU on the same frames (fidelity check for the
benchmark machine): prints per-frame values on both and the largest difference.

Usage: python benchmarks/media_device_check.py A.mp4 B.mp4 WEIGHTS SHA256 [--device cuda]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    """Score the first ``--frames`` frame pairs on the CPU and on ``--device``."""
    import av

    from evidence.media.lpips_gate import LpipsScorer

    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("weights")
    ap.add_argument("sha256")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--frames", type=int, default=4)
    args = ap.parse_args()
    frames = []
    with av.open(args.a) as ca, av.open(args.b) as cb:
        for i, (fa, fb) in enumerate(zip(ca.decode(video=0), cb.decode(video=0), strict=False)):
            if i >= args.frames:
                break
            frames.append((fa.to_ndarray(format="rgb24"), fb.to_ndarray(format="rgb24")))
    a = np.stack([f[0] for f in frames])
    b = np.stack([f[1] for f in frames])
    cpu = LpipsScorer(Path(args.weights), args.sha256, "cpu").score(a, b)
    dev = LpipsScorer(Path(args.weights), args.sha256, args.device).score(a, b)
    print("cpu   ", np.round(cpu, 6).tolist())
    print(f"{args.device:6s}", np.round(dev, 6).tolist())
    print(f"max |cpu - {args.device}| = {float(np.abs(cpu - dev).max()):.2e}")


if __name__ == "__main__":
    main()
