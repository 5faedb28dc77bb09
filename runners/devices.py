"""Device idle gate: parse ``npu-smi`` and ``nvidia-smi`` text and decide whether the devices
a session will use are idle before a server starts (and after it stopped).

Formats: Huawei's ``npu-smi`` as printed by Ascend drivers 23.x-25.x (default table, A3 two
chips per NPU / A2 one chip; ``-t proc-mem -i N``; ``-t usages -i N``; recorded samples in
``tests/fixtures/npu-smi/``); the ``nvidia-smi`` default table for NVIDIA.  Parsers are
tolerant of column spacing and skip lines they do not know.

Idle rule, after the stop gate of vLLM-Omni's MiniMax H3 NPU recipe
(``recipes/MiniMaxAI/MiniMax-H3-NPU.md``: "the port and processes were free, and all eight
cards were healthy and idle"): every device in use has health OK, no
process (``No process in device.`` / ``No running processes found``), AI core / GPU
utilisation 0 %, and memory used near the idle baseline.  The baseline thresholds:

* Ascend HBM: at most ``NPU_IDLE_HBM_FRACTION`` = 0.10 of capacity.  Source: idle A3 chips
  show 3.1-3.4 GB of 64 GB used by the driver reservation (about 5 %); 0.10 is twice that.
* NVIDIA memory: at most ``NVIDIA_IDLE_MEM_FRACTION`` = 0.02 of capacity (an idle H200 shows
  a few MiB of 143 GiB; 2 % leaves room for the driver's context on other cards).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from evidence.models import DeviceCheck

NPU_IDLE_HBM_FRACTION = 0.10
NVIDIA_IDLE_MEM_FRACTION = 0.02
TOOLS = ("none", "npu-smi", "nvidia-smi")

_PAIR = re.compile(r"(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)")
_BUS = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")


@dataclass
class ChipStatus:
    """One accelerator chip (an Ascend chip or an NVIDIA GPU).  Memory in MiB, use in %."""

    device: int
    chip: int = 0
    name: str = ""
    health: str = "OK"
    util_pct: float | None = None
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None


@dataclass
class DeviceProcess:
    """A process the tool lists on a device."""

    device: int
    chip: int | None
    pid: int
    name: str
    mem_mb: float | None = None


@dataclass
class DeviceTable:
    """Parsed output of ``npu-smi info`` or ``nvidia-smi``."""

    chips: list[ChipStatus] = field(default_factory=list)
    processes: list[DeviceProcess] = field(default_factory=list)
    no_process_devices: set[int] = field(default_factory=set)
    no_processes_at_all: bool = False


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_npu_smi_info(text: str) -> DeviceTable:
    """Parse the default ``npu-smi info`` table (A2 or A3 layout).

    Returns one :class:`ChipStatus` per chip row pair (``device`` = NPU id, ``chip`` = chip id,
    ``util_pct`` = AICore %, memory = HBM used/total MB) and the process rows.  Unknown lines
    are skipped; raises nothing.
    """
    out = DeviceTable()
    npu: int | None = None
    name = health = ""
    in_procs = False
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        low = line.lower()
        if "process id" in low:
            in_procs = True
            continue
        m = re.search(r"no running processes? found in npu\s*(\d+)", low)
        if m:
            out.no_process_devices.add(int(m.group(1)))
            continue
        cells = _cells(line)
        if in_procs:
            if len(cells) >= 4:
                ids = cells[0].split()
                if ids and ids[0].isdigit() and cells[1].isdigit():
                    out.processes.append(DeviceProcess(
                        device=int(ids[0]),
                        chip=int(ids[1]) if len(ids) > 1 and ids[1].isdigit() else None,
                        pid=int(cells[1]), name=cells[2], mem_mb=_num(cells[3])))
            continue
        if len(cells) < 3:
            continue
        first = cells[0].split()
        if len(first) >= 2 and first[0].isdigit() and not first[1].isdigit() and cells[1]:
            npu, name, health = int(first[0]), first[1], cells[1].split()[0]
            continue
        if npu is not None and _BUS.match(cells[1]) and first and first[0].isdigit():
            nums = cells[2].split()
            pairs = _PAIR.findall(cells[2])
            used, total = (float(pairs[-1][0]), float(pairs[-1][1])) if pairs else (None, None)
            out.chips.append(ChipStatus(
                device=npu, chip=int(first[0]), name=name, health=health,
                util_pct=_num(nums[0]) if nums else None,
                mem_used_mb=used, mem_total_mb=total))
    return out


def parse_npu_smi_proc_mem(text: str) -> tuple[bool, list[DeviceProcess]]:
    """Parse ``npu-smi info -t proc-mem -i N``: (said "No process in device.", processes).

    Process lines look like ``Process id:NNN Process name:python Process memory(MB):177``;
    a preceding ``Chip ID : n`` line sets the chip."""
    empty = "no process in device" in text.lower()
    procs: list[DeviceProcess] = []
    chip: int | None = None
    for line in text.splitlines():
        m = re.match(r"\s*Chip ID\s*:\s*(\d+)", line, re.I)
        if m:
            chip = int(m.group(1))
            continue
        m = re.search(r"Process id\s*:\s*(\d+)\s+Process name\s*:\s*(\S+)"
                      r"(?:\s+Process memory\(MB\)\s*:\s*(\d+(?:\.\d+)?))?", line, re.I)
        if m:
            procs.append(DeviceProcess(device=-1, chip=chip, pid=int(m.group(1)),
                                       name=m.group(2), mem_mb=_num(m.group(3) or "")))
    return empty, procs


def parse_npu_smi_usages(text: str) -> dict[int, dict[str, float]]:
    """Parse ``npu-smi info -t usages -i N``: chip id -> {key: value} for numeric lines such
    as ``HBM Usage Rate(%) : 5`` and ``Aicore Usage Rate(%) : 0``."""
    out: dict[int, dict[str, float]] = {}
    chip = 0
    for line in text.splitlines():
        key, sep, val = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key.lower() == "chip id":
            chip = int(val.strip())
            continue
        v = _num(val.strip())
        if v is not None:
            out.setdefault(chip, {})[key] = v
    return out


def parse_nvidia_smi(text: str) -> DeviceTable:
    """Parse the default ``nvidia-smi`` table: per GPU its name, utilisation %, memory
    used/total MiB, and the Processes section.  Unknown lines are skipped."""
    out = DeviceTable()
    gpu: int | None = None
    name = ""
    in_procs = False
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        low = line.lower()
        if low.startswith("| processes"):
            in_procs = True
            continue
        if in_procs:
            if "no running processes found" in low:
                out.no_processes_at_all = True
                continue
            toks = line.strip("| \n").split()
            if len(toks) >= 6 and toks[0].isdigit() and toks[3].isdigit():
                mem = re.match(r"(\d+)MiB", toks[-1])
                out.processes.append(DeviceProcess(
                    device=int(toks[0]), chip=None, pid=int(toks[3]),
                    name=" ".join(toks[5:-1]) if mem else " ".join(toks[5:]),
                    mem_mb=float(mem.group(1)) if mem else None))
            continue
        cells = _cells(line)
        if len(cells) < 3:
            continue
        first = cells[0].split()
        if first and first[0].isdigit() and _BUS.match(cells[1].split()[0] if cells[1] else ""):
            gpu = int(first[0])
            name = " ".join(first[1:-1]) if len(first) > 2 else " ".join(first[1:])
            continue
        mem = re.search(r"(\d+)MiB\s*/\s*(\d+)MiB", cells[1])
        if gpu is not None and mem:
            util = re.search(r"(\d+)%", cells[2])
            out.chips.append(ChipStatus(
                device=gpu, name=name, util_pct=float(util.group(1)) if util else None,
                mem_used_mb=float(mem.group(1)), mem_total_mb=float(mem.group(2))))
            gpu = None
    return out


Runner = Callable[[Sequence[str]], str]


def run_tool(argv: Sequence[str], timeout_s: float = 30.0) -> str:
    """Run a device tool and return its stdout; raises RuntimeError naming the command."""
    try:
        res = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"{' '.join(argv)}: {exc}") from exc
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {res.returncode}: {res.stderr.strip()}")
    return res.stdout


def detect_tool() -> str:
    """``npu-smi`` when on PATH, else ``nvidia-smi`` when on PATH, else ``none``."""
    for tool in ("npu-smi", "nvidia-smi"):
        if shutil.which(tool):
            return tool
    return "none"


def _judge(chips: list[ChipStatus], want: Sequence[int], fraction: float, label: str,
           ) -> list[str]:
    reasons: list[str] = []
    seen = {c.device for c in chips}
    for d in want:
        if d not in seen:
            reasons.append(f"{label} {d} not listed by the tool")
    for c in chips:
        if want and c.device not in want:
            continue
        who = f"{label} {c.device} chip {c.chip}" if label == "NPU" else f"GPU {c.device}"
        if c.health.upper() != "OK":
            reasons.append(f"{who} health {c.health}")
        if c.util_pct is None or c.util_pct > 0:
            reasons.append(f"{who} utilisation {c.util_pct} %")
        if c.mem_used_mb is None or not c.mem_total_mb:
            reasons.append(f"{who} memory not readable")
        elif c.mem_used_mb > fraction * c.mem_total_mb:
            reasons.append(f"{who} memory {c.mem_used_mb:.0f}/{c.mem_total_mb:.0f} MB used "
                           f"(idle at most {fraction:.0%})")
    return reasons


def check_idle(tool: str, devices: Sequence[int], run: Runner = run_tool,
               mem_fraction: float | None = None) -> DeviceCheck:
    """One idle check of ``devices`` (NPU ids or GPU indexes; empty = every device listed).

    ``tool`` is ``npu-smi``, ``nvidia-smi`` or ``none`` (no accelerator gate: recorded as
    NOT idle, detail "not checked", so the session's lifecycle cannot qualify on a check that
    never ran: a check that cannot fail is no check).  Tool failures give
    ``idle=False`` with the error in ``detail``; never raises."""
    now = datetime.now(UTC)
    if tool == "none":
        return DeviceCheck(idle=False, checked_at=now,
                           detail="not checked: --device-tool none (no accelerator gate)")
    reasons: list[str] = []
    try:
        if tool == "npu-smi":
            table = parse_npu_smi_info(run(["npu-smi", "info"]))
            reasons += _judge(table.chips, devices, mem_fraction or NPU_IDLE_HBM_FRACTION, "NPU")
            for p in table.processes:
                if not devices or p.device in devices:
                    reasons.append(f"NPU {p.device}: process {p.pid} {p.name}")
            for d in devices or sorted({c.device for c in table.chips}):
                empty, procs = parse_npu_smi_proc_mem(
                    run(["npu-smi", "info", "-t", "proc-mem", "-i", str(d)]))
                if not empty or procs:
                    names = ", ".join(f"{p.pid} {p.name}" for p in procs) or "unparsed output"
                    reasons.append(f"NPU {d}: proc-mem does not say 'No process in device.' "
                                   f"({names})")
        elif tool == "nvidia-smi":
            table = parse_nvidia_smi(run(["nvidia-smi"]))
            reasons += _judge(table.chips, devices, mem_fraction or NVIDIA_IDLE_MEM_FRACTION,
                              "GPU")
            for p in table.processes:
                if not devices or p.device in devices:
                    reasons.append(f"GPU {p.device}: process {p.pid} {p.name}")
        else:
            return DeviceCheck(idle=False, checked_at=now, detail=f"unknown device tool {tool!r}")
    except RuntimeError as exc:
        return DeviceCheck(idle=False, checked_at=now, detail=str(exc))
    detail = "; ".join(reasons) if reasons else f"{tool}: devices {list(devices) or 'all'} idle"
    return DeviceCheck(idle=not reasons, checked_at=now, detail=detail)


def wait_idle(tool: str, devices: Sequence[int], *, timeout_s: float, poll_s: float = 2.0,
              run: Runner = run_tool, sleep: Callable[[float], None] = time.sleep,
              ) -> DeviceCheck:
    """Poll :func:`check_idle` until idle or ``timeout_s`` passed; returns the last check."""
    end = time.monotonic() + timeout_s
    while True:
        chk = check_idle(tool, devices, run)
        if chk.idle or tool == "none" or time.monotonic() >= end:
            return chk
        sleep(poll_s)
