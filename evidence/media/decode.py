"""Streaming decode with PyAV: frames one at a time, pairs of files in lockstep.

Each file is decoded in its own background thread with FFmpeg's own threading on
(``thread_type = "AUTO"``); frames travel through a small bounded queue, so memory stays
flat in clip length (a handful of frames per file in flight).  Decoded frames are handed
over as PyAV frames; :func:`yuv_planes` gives zero-copy numpy views of their planes.

Errors: an unreadable file raises :class:`~evidence.media.errors.MediaInputError` naming
the file; a decode error in the middle of a stream is recorded (``DecodeStats.error``) and
ends that stream, it never passes silently.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from evidence.media.errors import MediaInputError

PLANAR_8BIT = {"yuv420p", "yuvj420p", "yuv422p", "yuvj422p", "yuv444p", "yuvj444p", "gray"}
"""Pixel formats whose planes the SSIM/PSNR code reads directly (8-bit planar)."""


def open_container(path: Path) -> Any:
    """Open ``path`` with PyAV; raises :class:`MediaInputError` for a missing, empty or
    unreadable file (the message names the file and FFmpeg's reason)."""
    p = Path(path)
    if not p.exists():
        raise MediaInputError(p, "file not found")
    if p.is_dir():
        raise MediaInputError(p, "is a directory, not a media file")
    if p.stat().st_size == 0:
        raise MediaInputError(p, "file is empty (0 bytes)")
    try:
        return av.open(str(p), "r")
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise MediaInputError(p, f"not a readable media container ({exc})") from exc


def yuv_planes(frame: Any) -> tuple[np.ndarray, ...]:
    """Zero-copy ``uint8`` views ``(height, width)`` of an 8-bit planar frame's planes.

    The views stay valid while ``frame`` is referenced.  Raises ``ValueError`` for a pixel
    format outside :data:`PLANAR_8BIT`.
    """
    fmt = frame.format.name
    if fmt not in PLANAR_8BIT:
        raise ValueError(f"pixel format {fmt} is not 8-bit planar YUV")
    out = []
    for p in frame.planes:
        buf = np.frombuffer(p, np.uint8, count=p.line_size * p.height)
        out.append(buf.reshape(p.height, p.line_size)[:, : p.width])
    return tuple(out)


@dataclass
class DecodeStats:
    """What the decode of one video stream saw, gathered frame by frame (O(1) memory).

    ``pts_steps`` maps each distinct pts step (in ``time_base`` units) to how often it
    occurred; ``non_increasing`` counts frames whose pts did not exceed the previous one;
    ``missing_pts`` counts frames without a pts.  ``error`` holds a decode error that ended
    the stream early.
    """

    frames: int = 0
    first_pts: int | None = None
    last_pts: int | None = None
    pts_steps: dict[int, int] = field(default_factory=dict)
    non_increasing: int = 0
    missing_pts: int = 0
    pix_fmts: set[str] = field(default_factory=set)
    sizes: set[tuple[int, int]] = field(default_factory=set)
    error: str | None = None
    time_base: Fraction | None = None

    def see(self, frame: Any) -> None:
        """Record one decoded frame."""
        self.frames += 1
        self.pix_fmts.add(frame.format.name)
        self.sizes.add((frame.width, frame.height))
        pts = frame.pts
        if pts is None:
            self.missing_pts += 1
            return
        if self.first_pts is None:
            self.first_pts = pts
        elif self.last_pts is not None:
            step = pts - self.last_pts
            self.pts_steps[step] = self.pts_steps.get(step, 0) + 1
            if step <= 0:
                self.non_increasing += 1
        self.last_pts = pts


_END = object()


class _Reader(threading.Thread):
    """Decode one file's first video stream into a bounded queue."""

    def __init__(self, path: Path, depth: int, transform: Callable[[Any, int], Any] | None,
                 packet_hook: Callable[[Any], None] | None) -> None:
        super().__init__(daemon=True, name=f"decode:{Path(path).name}")
        self.path = Path(path)
        self.q: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self.stats = DecodeStats()
        self.transform = transform
        self.packet_hook = packet_hook
        self.stop = threading.Event()
        self.container = open_container(self.path)
        if not self.container.streams.video:
            self.container.close()
            raise MediaInputError(self.path, "has no video stream")

    def run(self) -> None:
        c = self.container
        try:
            vs = c.streams.video[0]
            vs.thread_type = "AUTO"
            self.stats.time_base = vs.time_base
            for packet in c.demux(vs):
                if self.stop.is_set():
                    break
                if self.packet_hook is not None and packet.size:
                    self.packet_hook(packet)
                for frame in packet.decode():
                    index = self.stats.frames
                    self.stats.see(frame)
                    item = (frame, self.transform(frame, index) if self.transform else None)
                    while not self.stop.is_set():
                        try:
                            self.q.put(item, timeout=0.2)
                            break
                        except queue.Full:
                            continue
        except (av.FFmpegError, OSError, ValueError) as exc:
            self.stats.error = f"decode error after {self.stats.frames} frames: {exc}"
        finally:
            c.close()
            while True:
                try:
                    self.q.put(_END, timeout=0.2)
                    break
                except queue.Full:
                    if self.stop.is_set():
                        break

    def frames(self) -> Iterator[tuple[Any, Any]]:
        while True:
            item = self.q.get()
            if item is _END:
                return
            yield item


class PairDecoder:
    """Decode control and candidate in lockstep, in two background threads.

    Iterating yields ``(index, control_item, candidate_item)`` for each frame index both
    files have, where an item is ``(frame, transform(frame, index))``; frames past the
    shorter file are counted in the stats but not yielded.  ``transform`` runs in the decode
    thread (use it for colour conversion).  ``packet_hooks`` receive each demuxed video
    packet of the matching file.  Use as a context manager so the threads stop on early exit.
    """

    def __init__(self, control: Path, candidate: Path, *, depth: int = 6,
                 transform: Callable[[Any, int], Any] | None = None,
                 packet_hooks: tuple[Callable[[Any], None] | None, Callable[[Any], None] | None]
                 = (None, None)) -> None:
        self.readers = (
            _Reader(control, depth, transform, packet_hooks[0]),
            _Reader(candidate, depth, transform, packet_hooks[1]),
        )

    @property
    def stats(self) -> tuple[DecodeStats, DecodeStats]:
        """Decode statistics of control and candidate (complete after iteration)."""
        return self.readers[0].stats, self.readers[1].stats

    def __enter__(self) -> PairDecoder:
        for r in self.readers:
            r.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop both threads and wait for them."""
        for r in self.readers:
            r.stop.set()
        for r in self.readers:
            if r.is_alive():
                # drain so a blocked put() can finish
                while r.is_alive():
                    try:
                        r.q.get(timeout=0.05)
                    except queue.Empty:
                        pass
                r.join()

    def __iter__(self) -> Iterator[tuple[int, tuple[Any, Any], tuple[Any, Any]]]:
        ia, ib = self.readers[0].frames(), self.readers[1].frames()
        i = 0
        done_a = done_b = False
        while True:
            a = next(ia, None) if not done_a else None
            b = next(ib, None) if not done_b else None
            done_a, done_b = done_a or a is None, done_b or b is None
            if a is None or b is None:
                # drain the longer one so its stats count every frame
                for _ in ia if not done_a else ():
                    pass
                for _ in ib if not done_b else ():
                    pass
                return
            yield i, a, b
            i += 1
