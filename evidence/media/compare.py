"""``compare``: judge a candidate output against the control output of the same track.

One streaming pass decodes both files in lockstep (two background threads), and for each
frame pair computes SSIM/PSNR in FFmpeg's convention (FFmpeg's own filters in PyAV, or the
numpy transcription), the decoded-plane hashes (lossless mode) and, batched in its own
thread, LPIPS (lossy mode, when weights are given).  Then audio is decoded, the
structural checks run (versioned validator), and every metric is judged against its gate.

Order of judgement: structural checks first.  If the two files' headers disagree on
resolution or pixel format, no metric is computed at all; if a frame-level check fails
(count, timestamps, audio), the metrics are reported but not judged, and the report fails.

Lossless passes only when the decoded YUV planes of every frame and the decoded PCM are
bit-identical (PCM compared within this one decoder build, named in the report); packet
equality is recorded as well.  Lossy passes only when every gate passes; a metric that could
not be measured (no LPIPS weights, no ``[media]`` extra) fails its gate and says why.
"""

from __future__ import annotations

import hashlib
import math
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import av
import numpy as np

from evidence.media.audio import decode_audio, rms_ratio, spectral_cosine
from evidence.media.decode import PLANAR_8BIT, PairDecoder, open_container, yuv_planes
from evidence.media.errors import MediaInputError
from evidence.media.ffconv import SsimPsnrAccumulator
from evidence.media.gates import DEFAULT_GATES
from evidence.media.probe import build_probe, decoder_build, file_sha256, read_header
from evidence.media.validators import (
    CURRENT_VALIDATOR,
    Expected,
    get_validator,
    structural_checks,
)
from evidence.models import BitExact, InputFile, MediaMetric, MediaReport, QualityGates

LPIPS_BATCH = {"cpu": 2, "cuda": 16, "npu": 8}
"""Frame pairs per LPIPS batch by device kind (memory: a 1344x768 pair at batch 16 needs a
few GiB on a GPU)."""


BACKENDS = {
    "lavfi": "FFmpeg ssim/psnr filters in PyAV's libavfilter",
    "numpy": "numpy transcription of FFmpeg's ssim/psnr C code",
}


def _make_lavfi(frame: Any, backend: str) -> Any:
    """A :class:`~evidence.media.lavfi.LavfiScorer` for frames like ``frame``; None when
    ``backend`` is ``auto`` and the graph cannot be built (``lavfi``: the error is raised)."""
    from evidence.media.lavfi import LavfiScorer

    planes = yuv_planes(frame)
    try:
        return LavfiScorer(frame.width, frame.height, frame.format.name,
                           tuple(p.shape[0] * p.shape[1] for p in planes))
    except ValueError:
        if backend == "lavfi":
            raise
        return None


def packet_digests(path: Path) -> dict[str, list[str]]:
    """SHA-256 of every compressed packet, per stream (``video:0``, ``audio:0``, ...), in
    demux order.  Memory: one 64-character digest per packet."""
    out: dict[str, list[str]] = {}
    with open_container(path) as c:
        names: dict[int, str] = {}
        seen: dict[str, int] = {}
        for s in c.streams:
            names[s.index] = f"{s.type}:{seen.get(s.type, 0)}"
            seen[s.type] = seen.get(s.type, 0) + 1
        for pkt in c.demux():
            if pkt.size == 0 or pkt.stream.index not in names:
                continue
            out.setdefault(names[pkt.stream.index], []).append(
                hashlib.sha256(bytes(pkt)).hexdigest())
    return out


def _first_diff(a: list[str], b: list[str]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    if len(a) != len(b):
        return min(len(a), len(b))
    return None


def _plane_hash(planes: tuple[np.ndarray, ...]) -> bytes:
    h = hashlib.sha256()
    for p in planes:
        h.update(np.ascontiguousarray(p).data)
    return h.digest()


class _Progress:
    def __init__(self, enabled: bool, total: int | None, label: str) -> None:
        self.bar: Any = None
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                MofNCompleteColumn(), TimeElapsedColumn(),
                                TimeRemainingColumn(), console=Console(stderr=True),
                                transient=True)
            self.bar.start()
            self.task = self.bar.add_task(label, total=total)

    def advance(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.advance(self.task, n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _gate_ge(name: str, value: float | None, gate: Any, detail: dict[str, Any],
             why_missing: str | None = None) -> MediaMetric:
    passed = None if value is None else bool(value >= gate.threshold)
    if value is not None and math.isnan(value):
        passed = False
    if value is None and why_missing:
        detail = {**detail, "not_measured": why_missing}
        passed = False
    return MediaMetric(name=name, value=value, op=">=", threshold=gate.threshold,
                       passed=passed, source=gate.source, detail=detail)


def compare(
    control: Path,
    candidate: Path,
    *,
    mode: Literal["lossless", "lossy"],
    gates: QualityGates | None = None,
    device: str = "cpu",
    expected_frames: int | None = None,
    lpips_weights: Path | None = None,
    lpips_sha256: str | None = None,
    frame_stride: int = 1,
    progress: bool = False,
    expected: Expected | None = None,
    validator: str = CURRENT_VALIDATOR,
    gates_source: str | None = None,
    on_frame: Callable[[int], None] | None = None,
    audio_metrics: bool = True,
    ssim_backend: Literal["auto", "lavfi", "numpy"] = "auto",
) -> MediaReport:
    """Compare ``candidate`` against ``control`` and return a :class:`MediaReport`.

    ``mode``: ``"lossless"`` (bit-exact decoded planes and PCM) or ``"lossy"`` (gates).
    ``gates``: thresholds with sources (default :data:`~evidence.media.gates.DEFAULT_GATES`).
    ``device``: where LPIPS runs (``cpu``, ``cuda[:N]``, ``npu[:N]``); SSIM/PSNR and audio
    always run on the CPU.  ``expected_frames``: the track's frame count (else the control's
    count is expected); ``expected``: further expectations (resolution, fps, audio format).
    ``lpips_weights`` + ``lpips_sha256``: the AlexNet backbone file and its SHA-256 (both or
    neither); without them LPIPS is reported as not measured and a lossy report fails.
    ``frame_stride``: LPIPS on every N-th frame only (recorded in the report; SSIM/PSNR always
    use every frame).  ``progress``: a rich progress bar over frames on stderr.
    ``validator``: structural validator version (``media-gates/2``).  ``audio_metrics=False``
    skips the spectral cosine and RMS ratio (reported as not measured, so a lossy report
    fails; for timing the video path alone).  ``ssim_backend``: ``"lavfi"`` runs FFmpeg's own
    ``ssim``/``psnr`` filters inside PyAV (fast, the binary's code), ``"numpy"`` the exact
    numpy transcription of FFmpeg's C code (:mod:`evidence.media.ffconv`), ``"auto"`` the
    former when it can be built, else the latter; the report names the one used.

    Raises :class:`MediaInputError` when a file is missing, empty, not a media container or
    has no video stream, when the LPIPS weights fail authentication, or when the device is
    unavailable; ``ValueError`` for bad arguments.
    """
    t0 = time.perf_counter()
    if mode not in ("lossless", "lossy"):
        raise ValueError(f"mode must be 'lossless' or 'lossy', got {mode!r}")
    if frame_stride < 1:
        raise ValueError("frame_stride must be >= 1")
    if (lpips_weights is None) != (lpips_sha256 is None):
        raise ValueError("give both lpips_weights and lpips_sha256, or neither")
    val = get_validator(validator)
    gates = gates or DEFAULT_GATES
    if gates_source is None:
        gates_source = "defaults" if gates is DEFAULT_GATES else "caller"
    if expected is None:
        expected = Expected(frames=expected_frames,
                            audio_latent_hz=gates.audio_latent_rate_hz.threshold)
    elif expected_frames is not None:
        expected = Expected(**{**expected.__dict__, "frames": expected_frames})
    control, candidate = Path(control), Path(candidate)
    hdr_c, hdr_k = read_header(control), read_header(candidate)
    for p, h in ((control, hdr_c), (candidate, hdr_k)):
        if h["video"] is None:
            raise MediaInputError(p, "has no video stream")
    sha_c, sha_k = file_sha256(control), file_sha256(candidate)
    dev_kind = device.split(":")[0]
    if dev_kind not in ("cpu", "cuda", "npu"):
        raise MediaInputError(None, f"unknown device {device!r}; use cpu, cuda or npu")

    scorer = None
    lpips_missing: str | None = None
    if mode == "lossy":
        if lpips_weights is None:
            lpips_missing = ("no LPIPS backbone weights given (--lpips-weights FILE "
                             "--lpips-sha256 HEX)")
        else:
            try:
                from evidence.media.lpips_gate import LpipsScorer
                scorer = LpipsScorer(Path(lpips_weights), str(lpips_sha256), device)
            except ImportError as exc:
                lpips_missing = f"LPIPS needs the [media] extra (torch, lpips): {exc}"

    vc, vk = hdr_c["video"], hdr_k["video"]
    same_geometry = (vc["width"], vc["height"]) == (vk["width"], vk["height"])
    planar = vc["pix_fmt"] in PLANAR_8BIT and vk["pix_fmt"] == vc["pix_fmt"]
    metrics_possible = same_geometry and planar
    acc = SsimPsnrAccumulator()
    lossless = mode == "lossless"
    hashes_c, hashes_k = hashlib.sha256(), hashlib.sha256()
    differing = 0
    first_diff: int | None = None
    lp_values: list[tuple[int, float]] = []
    batch: list[tuple[int, np.ndarray, np.ndarray]] = []
    bsize = LPIPS_BATCH.get(dev_kind, 4)
    metric_error: str | None = None

    def to_rgb(frame: Any, index: int) -> Any:
        if scorer is None or index % frame_stride:
            return None
        return frame.to_ndarray(format="rgb24")

    # LPIPS runs in its own thread, fed whole batches through a short queue, so the
    # accelerator works while the CPU decodes and computes SSIM/PSNR.  Every batch has the
    # same shape (the last one is padded and the padding dropped), so cuDNN tunes once.
    lp_queue: queue.Queue[Any] = queue.Queue(maxsize=2)
    lp_box: dict[str, Any] = {}

    def lpips_job() -> None:
        assert scorer is not None
        while True:
            item = lp_queue.get()
            if item is None:
                return
            if "error" in lp_box:
                continue
            idx, a_, b_, n_real = item
            try:
                vals = scorer.score(a_, b_)
                lp_values.extend((i_, float(v)) for i_, v in zip(idx, vals[:n_real],
                                                                 strict=True))
            except BaseException as exc:  # reported by the caller's thread
                lp_box["error"] = exc

    lp_thread = threading.Thread(target=lpips_job, name="lpips", daemon=True)
    if scorer is not None:
        lp_thread.start()

    def flush() -> None:
        if not batch:
            return
        n_real = len(batch)
        while len(batch) < bsize:
            batch.append(batch[-1])
        lp_queue.put(([b[0] for b in batch[:n_real]], np.stack([b[1] for b in batch]),
                      np.stack([b[2] for b in batch]), n_real))
        batch.clear()

    def frame_job(i: int, fa: Any, fb: Any, score: bool
                  ) -> tuple[Any, bytes | None, bytes | None]:
        pa, pb = yuv_planes(fa), yuv_planes(fb)
        if tuple(p.shape for p in pa) != tuple(p.shape for p in pb):
            raise ValueError(f"plane shapes differ: {[p.shape for p in pa]} and "
                             f"{[p.shape for p in pb]}")
        fs = acc.score(i, pa, pb) if score else None
        if lossless:
            return fs, _plane_hash(pa), _plane_hash(pb)
        return fs, None, None

    if ssim_backend not in ("auto", "lavfi", "numpy"):
        raise ValueError(f"ssim_backend must be auto, lavfi or numpy, got {ssim_backend!r}")
    lav: Any = None
    backend_used = "numpy"

    # Audio is small (a 15 s stereo track is 4 MB of float32): decode it and compute its
    # metrics in a background thread while the video streams (numpy and scipy.fft release the
    # GIL), so it costs no wall time on a machine with a spare core.
    audio_box: dict[str, Any] = {}

    def audio_job() -> None:
        try:
            ac_, ak_ = decode_audio(control), decode_audio(candidate)
            audio_box["decoded"] = (ac_, ak_)
            if mode == "lossy" and audio_metrics and ac_ is not None and ak_ is not None and \
                    ac_.channels == ak_.channels and ac_.sample_rate == ak_.sample_rate and \
                    not ac_.nonfinite and not ak_.nonfinite:
                try:
                    audio_box["cosine"] = spectral_cosine(ac_.samples, ak_.samples)
                except ValueError as exc:
                    audio_box["cosine_error"] = str(exc)
                audio_box["rms"] = rms_ratio(ac_.samples, ak_.samples)
        except BaseException as exc:  # re-raised in the caller's thread below
            audio_box["error"] = exc

    audio_thread = threading.Thread(target=audio_job, name="audio", daemon=True)
    audio_thread.start()

    total = expected.frames or vc["frames"]
    bar = _Progress(progress, total, f"comparing {candidate.name}")
    # SSIM/PSNR (and plane hashes) of each frame pair run in a small thread pool (numpy
    # releases the GIL); results are taken in frame order, with a bounded number in flight.
    workers = max(1, min(4, os.cpu_count() or 1))
    pending: deque[tuple[int, Future[Any], Any, Any]] = deque()

    def take_one() -> None:
        nonlocal differing, first_diff, metric_error
        i, fut, _fa, _fb = pending.popleft()
        try:
            fs, ha, hb = fut.result()
        except ValueError as exc:
            if metric_error is None:
                metric_error = f"frame {i}: {exc}"
            return
        if metric_error is not None:
            return
        if fs is not None:
            acc.accumulate(fs)
        if lossless:
            assert ha is not None and hb is not None
            hashes_c.update(ha)
            hashes_k.update(hb)
            if ha != hb:
                differing += 1
                if first_diff is None:
                    first_diff = i

    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ssim") as pool, \
                PairDecoder(control, candidate,
                            transform=to_rgb if scorer is not None and metrics_possible
                            else None) as pairs:
            for i, (fa, ra), (fb, rb) in pairs:
                if metrics_possible and metric_error is None:
                    if i == 0 and ssim_backend != "numpy":
                        lav = _make_lavfi(fa, ssim_backend)
                        backend_used = "lavfi" if lav is not None else "numpy"
                    if lav is not None:
                        try:
                            lav.push(i, fa, fb)
                            for fs in lav.pull():
                                acc.accumulate(fs)
                        except (av.FFmpegError, ValueError, KeyError) as exc:
                            metric_error = f"frame {i}: libavfilter: {exc}"
                    if lav is None or lossless:
                        pending.append((i, pool.submit(frame_job, i, fa, fb, lav is None), fa,
                                        fb))
                    while len(pending) > 2 * workers:
                        take_one()
                    if ra is not None and rb is not None:
                        batch.append((i, ra, rb))
                        if len(batch) >= bsize:
                            flush()
                bar.advance()
                if on_frame is not None:
                    on_frame(i)
            while pending:
                take_one()
            if lav is not None and metric_error is None:
                try:
                    for fs in lav.close():
                        acc.accumulate(fs)
                except (av.FFmpegError, ValueError, KeyError) as exc:
                    metric_error = f"libavfilter: {exc}"
            if metric_error is None:
                flush()
            stats_c, stats_k = pairs.stats
    finally:
        bar.close()
        if scorer is not None:
            lp_queue.put(None)
            lp_thread.join()
    if "error" in lp_box:
        raise lp_box["error"]

    audio_thread.join()
    if "error" in audio_box:
        raise audio_box["error"]
    aud_c, aud_k = audio_box["decoded"]
    probe_c = build_probe(control, hdr_c, stats_c, aud_c, sha_c)
    probe_k = build_probe(candidate, hdr_k, stats_k, aud_k, sha_k)
    checks = structural_checks(probe_c, probe_k, expected, val)
    structural_ok = all(c.passed for c in checks)
    reasons = [f"structural: {c.name}: "
               + (f"expected {c.expected}, " if c.expected is not None else "")
               + f"got {c.actual}" for c in checks if not c.passed]

    metrics: list[MediaMetric] = []
    if not metrics_possible:
        why: str | None = (
            "resolutions differ" if not same_geometry else
            f"pixel formats {vc['pix_fmt']}/{vk['pix_fmt']} are not the same 8-bit planar YUV")
        reasons.append(f"video metrics not computed: {why}")
    elif metric_error is not None:
        reasons.append(f"video metrics stopped: {metric_error}")
    judged = structural_ok

    if metrics_possible and acc.frames:
        r = acc.result()
        ssim_detail: dict[str, Any] = {k: r[k] for k in ("ssim_y", "ssim_u", "ssim_v",
                                                          "ssim_min", "ssim_min_frame",
                                                          "frames")}
        ssim_detail["backend"] = BACKENDS[backend_used]
        psnr_detail = {"psnr_y_db": r["psnr_y"], "psnr_u_db": r["psnr_u"],
                       "psnr_v_db": r["psnr_v"], "psnr_min_db": r["psnr_min"],
                       "psnr_min_frame": r["psnr_min_frame"], "psnr_max_db": r["psnr_max"],
                       "frames": r["frames"], "backend": BACKENDS[backend_used]}
        ssim_v = float(r["ssim_all"])  # type: ignore[arg-type]
        psnr_v = float(r["psnr_avg"])  # type: ignore[arg-type]
        if mode == "lossy":
            metrics.append(_gate_ge("ssim_all", ssim_v, gates.ssim_min, ssim_detail))
            metrics.append(_gate_ge("psnr_avg_db", psnr_v, gates.psnr_min_db, psnr_detail))
        else:
            metrics.append(MediaMetric(name="ssim_all", value=ssim_v, detail=ssim_detail))
            metrics.append(MediaMetric(name="psnr_avg_db", value=psnr_v, detail=psnr_detail))
        for plane in ("y", "u", "v"):
            metrics.append(MediaMetric(name=f"ssim_{plane}", value=r[f"ssim_{plane}"]))
            metrics.append(MediaMetric(name=f"psnr_{plane}_db", value=r[f"psnr_{plane}"]))

    if mode == "lossy":
        g = gates.lpips_max
        if lp_values:
            vals = np.array([v for _, v in lp_values])
            worst = int(np.argmax(vals))
            value = float(vals.mean())
            assert scorer is not None
            detail = {"frames_scored": len(vals), "frame_stride": frame_stride,
                      "max": float(vals[worst]), "max_frame": lp_values[worst][0],
                      "net": "alex", "version": "0.1", "device": device,
                      "backbone_sha256": scorer.weights_sha256,
                      "linear_layers_sha256": scorer.linear_sha256}
            metrics.append(MediaMetric(name="lpips", value=value, op="<=", threshold=g.threshold,
                                       passed=bool(value <= g.threshold), source=g.source,
                                       detail=detail))
        else:
            why = lpips_missing or ("video metrics not computed" if not metrics_possible
                                    else "no frame scored")
            metrics.append(MediaMetric(name="lpips", value=None, op="<=", threshold=g.threshold,
                                       passed=False, source=g.source,
                                       detail={"not_measured": why}))

    bit_exact = None
    if lossless:
        pk_c, pk_k = packet_digests(control), packet_digests(candidate)
        streams = sorted(set(pk_c) | set(pk_k))
        pcm_equal = None
        if aud_c is not None and aud_k is not None:
            pcm_equal = aud_c.pcm_sha256 == aud_k.pcm_sha256 and \
                aud_c.samples.shape == aud_k.samples.shape
        frames_equal = (metrics_possible and metric_error is None and differing == 0
                        and stats_c.frames == stats_k.frames and acc.frames == stats_c.frames)
        bit_exact = BitExact(
            packets_equal={s: pk_c.get(s) == pk_k.get(s) for s in streams},
            first_differing_packet={s: _first_diff(pk_c.get(s, []), pk_k.get(s, []))
                                    for s in streams},
            frames_equal=frames_equal,
            first_differing_frame=first_diff if first_diff is not None else (
                None if frames_equal else min(stats_c.frames, stats_k.frames)),
            frames_compared=acc.frames,
            differing_frames=differing,
            pcm_equal=pcm_equal,
            decoder_build=decoder_build(),
            video_sha256={"control": hashes_c.hexdigest(), "candidate": hashes_k.hexdigest()},
            pcm_sha256={k: a.pcm_sha256 for k, a in (("control", aud_c), ("candidate", aud_k))
                        if a is not None},
        )
        if not frames_equal:
            where = bit_exact.first_differing_frame
            reasons.append(f"lossless: decoded frames differ ({differing} of {acc.frames} "
                           f"compared differ; first differing frame {where})")
        if pcm_equal is False:
            reasons.append(f"lossless: decoded PCM differs (decoder build {decoder_build()})")
        elif pcm_equal is None and expected.audio:
            reasons.append("lossless: PCM not compared (audio stream missing)")

    # audio metrics
    if mode == "lossy":
        ac, rg = gates.audio_spectral_cosine_min, gates.audio_rms_ratio
        why = None
        if not audio_metrics:
            why = "audio metrics not requested (audio_metrics=False)"
        elif aud_c is None or aud_k is None:
            why = "audio stream missing"
        elif aud_c.channels != aud_k.channels or aud_c.sample_rate != aud_k.sample_rate:
            why = (f"audio formats differ: {aud_c.channels} ch {aud_c.sample_rate} Hz vs "
                   f"{aud_k.channels} ch {aud_k.sample_rate} Hz")
        elif aud_c.nonfinite or aud_k.nonfinite:
            why = "non-finite audio samples"
        if why is None and "cosine_error" in audio_box:
            why = audio_box["cosine_error"]
        if why is not None:
            metrics.append(_gate_ge("audio_spectral_cosine", None, ac, {}, why))
            metrics.append(MediaMetric(name="audio_rms_ratio", value=None, op="in",
                                       threshold=[rg.low, rg.high], passed=False,
                                       source=rg.source, detail={"not_measured": why}))
        else:
            cos, cos_detail = audio_box["cosine"]
            metrics.append(_gate_ge("audio_spectral_cosine", cos, ac, cos_detail))
            ratio = audio_box["rms"]
            metrics.append(MediaMetric(
                name="audio_rms_ratio", value=ratio, op="in", threshold=[rg.low, rg.high],
                passed=bool(rg.low <= ratio <= rg.high), source=rg.source,
                detail={"inclusive": True}))

    for m in metrics:
        if m.passed is False:
            shown = "not measured" if m.value is None else f"{m.value:.6g}"
            why_nm = m.detail.get("not_measured")
            reasons.append(f"{m.name} {shown}" + (f" ({why_nm})" if why_nm else
                                                  f", gate {m.op} {m.threshold}"))
    if not judged:
        for m in metrics:
            if m.passed is not None:
                m.detail["not_judged"] = "structural checks failed"
    passed = structural_ok and not any(
        m.passed is False for m in metrics) and (not metrics_possible or metric_error is None)
    if mode == "lossy":
        passed = passed and metrics_possible and acc.frames > 0
    if lossless:
        assert bit_exact is not None
        passed = passed and bit_exact.frames_equal and (
            bit_exact.pcm_equal is True or (bit_exact.pcm_equal is None and not expected.audio))
    return MediaReport(
        validator_version=val.version,
        control=InputFile(path=str(control), sha256=sha_c, mime="video/mp4"),
        candidate=InputFile(path=str(candidate), sha256=sha_k, mime="video/mp4"),
        mode=mode, device=device, frame_stride=frame_stride, structural=checks,
        bit_exact=bit_exact, metrics=metrics, passed=bool(passed), reasons=reasons,
        created_at=datetime.now(UTC), decoder_build=decoder_build(),
        gates_source=gates_source, wall_s=time.perf_counter() - t0,
    )


def expected_from_scope(scope: Any, track_id: str | None) -> tuple[Expected, str | None]:
    """Expectations (frames, resolution, fps, latent rate) from a campaign scope and one of
    its tracks; returns ``(expected, track quality mode or None)``.  Raises ``KeyError``
    naming the valid track ids for an unknown track."""
    w = scope.workload
    frames = None
    qmode = None
    if track_id is not None:
        t = scope.track(track_id)
        frames, qmode = t.expected_frames, t.quality_mode
    return Expected(frames=frames, width=w.width, height=w.height, fps=Fraction(w.fps),
                    audio_latent_hz=scope.quality_gates.audio_latent_rate_hz.threshold), qmode
