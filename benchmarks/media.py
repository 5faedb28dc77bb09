"""Benchmark: our structural checks + SSIM + PSNR against ffmpeg's filters on a 15 s pair.

The pair is made with PyAV (cached in ``benchmarks/out/``): 362 frames of 1344x768 at
24 fps, H.264 (libx264, preset ``--preset``, CRF 23) + AAC stereo 32 kHz; the candidate adds
light noise.  Each repeat runs, in separate processes on the same pair in the same run:

* ``ffmpeg -i A -i B -lavfi "ssim;[0:v][1:v]psnr" -f null -`` (the Debian binary);
* ``compare(A, B, mode="lossy", audio_metrics=False)`` without LPIPS weights: structural
  checks (audio decode included), SSIM and PSNR.

It reports wall time (median of ``--repeats``), CPU seconds and peak RSS (the child's
``ru_maxrss``; CPU time is the fairer figure on a machine shared with other work),
our/ffmpeg ratios against the targets (<= 1.0x ffmpeg's wall, < 400 MB), and the SSIM/PSNR
figures of both side by side.  With ``--lpips-weights``/``--lpips-sha256`` (and e.g.
``--device cuda``) it also times the whole gate set with LPIPS on every frame.

Usage::

    python benchmarks/media.py [--repeats 3] [--preset veryfast]
    python benchmarks/media.py --device cuda --lpips-weights alexnet.ckpt \\
        --lpips-sha256 443c5bc3... --skip-ffmpeg
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "benchmarks" / "out"


def make_pair(preset: str) -> tuple[Path, Path]:
    """Create (once) the 15 s benchmark pair; returns (control, candidate)."""
    from evidence.media.synth import ClipSpec, make_clip

    OUT.mkdir(parents=True, exist_ok=True)
    a = OUT / f"control_362_{preset}.mp4"
    b = OUT / f"candidate_362_{preset}.mp4"
    spec = ClipSpec(frames=362, width=1344, height=768, fps=24, crf=23, preset=preset)
    for path, s in ((a, spec), (b, ClipSpec(**{**spec.__dict__, "noise": 1.5}))):
        if not path.exists():
            t = time.perf_counter()
            tmp = path.with_suffix(".tmp.mp4")
            make_clip(tmp, s)
            tmp.replace(path)
            print(f"made {path.name} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return a, b


def _child(cmd: list[str]) -> tuple[float, float, str, float]:
    """Run ``cmd``; returns (wall s, peak RSS MiB of exactly this child, stdout+stderr,
    CPU seconds (user + system) of the child)."""
    t = time.perf_counter()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as p:
        assert p.stdout is not None
        text = p.stdout.read()
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t
    if p.returncode not in (0, 1):
        raise SystemExit(f"{cmd[0]} failed ({p.returncode}):\n{text[-3000:]}")
    return wall, usage.ru_maxrss / 1024, text, usage.ru_utime + usage.ru_stime


def _worker(args: argparse.Namespace) -> None:
    """Run inside a child process: compare() ``--in-process`` times (the first is cold:
    imports, model load, CUDA start), print JSON with the walls, figures and RSS."""
    from evidence.media import compare

    kw = {}
    if args.lpips_weights:
        kw = {"lpips_weights": Path(args.lpips_weights), "lpips_sha256": args.lpips_sha256}
    walls = []
    for _ in range(args.in_process):
        t = time.perf_counter()
        r = compare(Path(args.a), Path(args.b), mode="lossy", device=args.device,
                    expected_frames=362, audio_metrics=bool(args.lpips_weights),
                    ssim_backend=args.ssim_backend, **kw)
        walls.append(time.perf_counter() - t)
    wall = walls[0]
    vals = {m.name: m.value for m in r.metrics}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("\n" + json.dumps({"wall": wall, "walls": walls, "rss_mib": rss, "metrics": vals,
                      "structural_ok": all(c.passed for c in r.structural)}))


def _parse_ffmpeg(text: str) -> dict[str, float]:
    s = re.search(r"SSIM Y:([\d.]+) .*?U:([\d.]+) .*?V:([\d.]+) .*?All:([\d.]+)", text)
    p = re.search(r"PSNR y:([\d.inf]+) u:([\d.inf]+) v:([\d.inf]+) average:([\d.inf]+)", text)
    out: dict[str, float] = {}
    if s:
        out.update(zip(("ssim_y", "ssim_u", "ssim_v", "ssim_all"), map(float, s.groups()),
                       strict=True))
    if p:
        out.update(zip(("psnr_y_db", "psnr_u_db", "psnr_v_db", "psnr_avg_db"),
                       map(float, p.groups()), strict=True))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--preset", default="veryfast", help="libx264 preset of the pair")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--lpips-weights")
    ap.add_argument("--lpips-sha256")
    ap.add_argument("--skip-ffmpeg", action="store_true")
    ap.add_argument("--ssim-backend", default="auto", choices=["auto", "lavfi", "numpy"])
    ap.add_argument("--in-process", type=int, default=1,
                    help="compare() calls per child process (later ones are warm)")
    ap.add_argument("--json-out", help="also write the figures as JSON here")
    ap.add_argument("--worker", nargs=2, metavar=("A", "B"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.a, args.b = args.worker
        _worker(args)
        return

    from rich.console import Console
    from rich.table import Table

    con = Console()
    a, b = make_pair(args.preset)
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None and not args.skip_ffmpeg:
        raise SystemExit("ffmpeg not found: apt-get install -y ffmpeg (or --skip-ffmpeg)")
    ff_walls: list[float] = []
    ff_rss: list[float] = []
    our_walls: list[float] = []
    our_proc_walls: list[float] = []
    our_rss: list[float] = []
    warm_walls: list[float] = []
    ff_cpu: list[float] = []
    our_cpu: list[float] = []
    ff_vals: dict[str, float] = {}
    our_vals: dict[str, float] = {}
    extra = []
    if args.lpips_weights:
        extra = ["--lpips-weights", args.lpips_weights, "--lpips-sha256", args.lpips_sha256]
    for i in range(args.repeats):
        if not args.skip_ffmpeg:
            assert ffmpeg is not None
            w, rss, text, cpu = _child([ffmpeg, "-hide_banner", "-nostats", "-i", str(a), "-i",
                                   str(b), "-lavfi", "ssim;[0:v][1:v]psnr", "-f", "null", "-"])
            ff_walls.append(w)
            ff_rss.append(rss)
            ff_cpu.append(cpu)
            ff_vals = _parse_ffmpeg(text)
        w, rss, text, cpu = _child([sys.executable, __file__, "--device", args.device, *extra,
                                    "--ssim-backend", args.ssim_backend,
                               "--in-process", str(args.in_process),
                               "--worker", str(a), str(b)])
        doc = json.loads(text.strip().splitlines()[-1])
        our_walls.append(doc["wall"])
        our_proc_walls.append(w)
        our_rss.append(rss)
        our_cpu.append(cpu)
        our_vals = doc["metrics"]
        warm = doc["walls"][1:]
        con.print(f"repeat {i + 1}: ffmpeg {ff_walls[-1] if ff_walls else float('nan'):.2f} s,"
                  f" ours {doc['wall']:.2f} s (process {w:.2f} s)"
                  + (f", warm in-process {', '.join(f'{x:.2f}' for x in warm)} s" if warm
                     else ""))
        warm_walls.extend(warm)

    t = Table(title=f"362-frame 1344x768 pair ({args.preset}), SSIM backend "
                    f"{args.ssim_backend}, {args.repeats} repeats, "
                    f"load avg {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    t.add_column("tool")
    t.add_column("wall median s", justify="right")
    t.add_column("wall min s", justify="right")
    t.add_column("peak RSS MiB", justify="right")
    t.add_column("CPU s (process)", justify="right")
    t.add_column("vs ffmpeg", justify="right")
    ffm = statistics.median(ff_walls) if ff_walls else float("nan")
    if ff_walls:
        t.add_row("ffmpeg ssim+psnr", f"{ffm:.2f}", f"{min(ff_walls):.2f}",
                  f"{max(ff_rss):.0f}", f"{statistics.median(ff_cpu):.2f}", "1.00x")
    label = "campaign-bot compare (structural+SSIM+PSNR"
    label += "+audio+LPIPS)" if args.lpips_weights else ")"
    om = statistics.median(our_walls)
    t.add_row(label, f"{om:.2f}", f"{min(our_walls):.2f}", f"{max(our_rss):.0f}",
              f"{statistics.median(our_cpu):.2f}", f"{om / ffm:.2f}x" if ff_walls else "-")
    if warm_walls:
        wm = statistics.median(warm_walls)
        t.add_row("  same, warm (2nd+ call in one process)", f"{wm:.2f}",
                  f"{min(warm_walls):.2f}", "", "", f"{wm / ffm:.2f}x" if ff_walls else "-")
    opm = statistics.median(our_proc_walls)
    t.add_row("  same, whole process (imports included)", f"{opm:.2f}",
              f"{min(our_proc_walls):.2f}", "", "", f"{opm / ffm:.2f}x" if ff_walls else "-")
    con.print(t)
    if ff_vals:
        v = Table(title="figures (ours vs ffmpeg)")
        v.add_column("metric")
        v.add_column("ours", justify="right")
        v.add_column("ffmpeg", justify="right")
        v.add_column("|diff|", justify="right")
        for k, fv in ff_vals.items():
            ov = our_vals.get(k)
            diff = abs(ov - fv) if ov is not None else float("nan")
            v.add_row(k, f"{ov:.6f}" if ov is not None else "-", f"{fv:.6f}", f"{diff:.1e}")
        con.print(v)
    if args.lpips_weights:
        con.print(f"lpips = {our_vals.get('lpips')}")
    targets = []
    if ff_walls:
        targets.append(f"wall {om / ffm:.2f}x ffmpeg (target <= 1.0x): "
                       f"{'MET' if om <= ffm else 'NOT MET'}")
    targets.append(f"peak RSS {max(our_rss):.0f} MiB (target < 400 MB): "
                   f"{'MET' if max(our_rss) * 1.048576 < 400 else 'NOT MET'}")
    for line in targets:
        con.print(line)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({
            "ffmpeg_walls": ff_walls, "ffmpeg_rss_mib": ff_rss, "our_walls": our_walls,
            "our_process_walls": our_proc_walls, "our_rss_mib": our_rss,
            "warm_walls": warm_walls, "device": args.device, "ffmpeg_cpu_s": ff_cpu,
            "our_cpu_s": our_cpu, "ssim_backend": args.ssim_backend,
            "ffmpeg_values": ff_vals, "our_values": our_vals,
            "loadavg": os.getloadavg(), "cpus": os.cpu_count()}, indent=2))


if __name__ == "__main__":
    main()
