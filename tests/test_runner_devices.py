"""Device idle gate: npu-smi and nvidia-smi parsers on recorded-format outputs, and the gate's
decisions (runners.devices)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from runners import devices

FIX = Path(__file__).parent / "fixtures"


def _fx(name: str) -> str:
    return (FIX / name).read_text()


def test_formats_sample_parses() -> None:
    """The A3 community sample in tests/fixtures/npu-smi/FORMATS.md (elided with ``...``)."""
    text = _fx("npu-smi/FORMATS.md")
    block = re.search(r"```\n(.*?)```", text, re.S)
    assert block is not None
    table = devices.parse_npu_smi_info(block.group(1))
    assert [(c.device, c.chip, c.name, c.health) for c in table.chips] == [
        (0, 0, "Ascend910", "OK"), (0, 1, "Ascend910", "OK")]
    assert [(c.util_pct, c.mem_used_mb, c.mem_total_mb) for c in table.chips] == [
        (0, 3419, 65536), (0, 3196, 65536)]
    assert table.processes == []
    assert table.no_process_devices == {0}


def test_npu_smi_a3_idle_two_chips_per_npu() -> None:
    table = devices.parse_npu_smi_info(_fx("npu-smi/info-a3-idle.txt"))
    assert [(c.device, c.chip) for c in table.chips] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [c.mem_used_mb for c in table.chips] == [3419, 3196, 3401, 3188]
    assert table.processes == []
    assert table.no_process_devices == {0, 1}


def test_npu_smi_a3_busy_processes_and_health() -> None:
    table = devices.parse_npu_smi_info(_fx("npu-smi/info-a3-busy.txt"))
    assert [c.util_pct for c in table.chips] == [87, 85, 0, 0]
    assert table.chips[2].health == "Warning"
    assert [(p.device, p.chip, p.pid, p.name, p.mem_mb) for p in table.processes] == [
        (0, 0, 1774110, "VLLMWorker_PP", 56684), (0, 1, 1774111, "VLLMWorker_PP", 56301)]
    assert table.no_process_devices == {1}


def test_npu_smi_a2_one_chip_per_npu() -> None:
    table = devices.parse_npu_smi_info(_fx("npu-smi/info-a2-idle.txt"))
    assert [(c.device, c.chip, c.name) for c in table.chips] == [
        (0, 0, "910B1"), (1, 0, "910B1"), (2, 0, "910B1"), (3, 0, "910B1")]
    assert all(c.mem_total_mb == 65536 and c.util_pct == 0 for c in table.chips)


@pytest.mark.parametrize(("name", "empty", "pids"), [
    ("proc-mem-idle.txt", True, []),
    ("proc-mem-busy.txt", False, [(0, 1774110, 56684), (1, 1774111, 177)]),
], ids=["idle", "busy"])
def test_npu_smi_proc_mem(name: str, empty: bool, pids: list[tuple[int, int, int]]) -> None:
    got_empty, procs = devices.parse_npu_smi_proc_mem(_fx(f"npu-smi/{name}"))
    assert got_empty is empty
    assert [(p.chip, p.pid, p.mem_mb) for p in procs] == pids


def test_npu_smi_usages() -> None:
    u = devices.parse_npu_smi_usages(_fx("npu-smi/usages-a3.txt"))
    assert u[0]["HBM Usage Rate(%)"] == 5 and u[0]["Aicore Usage Rate(%)"] == 0
    assert u[1]["HBM Capacity(MB)"] == 65536


def test_nvidia_smi_idle_and_busy() -> None:
    idle = devices.parse_nvidia_smi(_fx("nvidia-smi/idle.txt"))
    assert [(c.device, c.name, c.util_pct, c.mem_used_mb, c.mem_total_mb)
            for c in idle.chips] == [(0, "NVIDIA H200", 0, 1, 143771),
                                     (1, "NVIDIA H200", 0, 1, 143771)]
    assert idle.no_processes_at_all and idle.processes == []
    busy = devices.parse_nvidia_smi(_fx("nvidia-smi/busy.txt"))
    assert busy.chips[0].util_pct == 97 and busy.chips[0].mem_used_mb == 98304
    assert [(p.device, p.pid, p.name, p.mem_mb) for p in busy.processes] == [
        (0, 48211, "/usr/bin/python3", 98290)]


def _runner(info: str, proc_mem: str) -> devices.Runner:
    def run(argv: Sequence[str]) -> str:
        if argv[0] == "nvidia-smi":
            return _fx(f"nvidia-smi/{info}")
        return _fx(f"npu-smi/{proc_mem}") if "-t" in argv else _fx(f"npu-smi/{info}")
    return run


@pytest.mark.parametrize(("tool", "info", "proc", "devs", "idle", "why"), [
    ("npu-smi", "info-a3-idle.txt", "proc-mem-idle.txt", [0, 1], True, ""),
    ("npu-smi", "info-a2-idle.txt", "proc-mem-idle.txt", [0, 1, 2, 3], True, ""),
    ("npu-smi", "info-a3-busy.txt", "proc-mem-idle.txt", [0], False, "utilisation 87"),
    ("npu-smi", "info-a3-busy.txt", "proc-mem-idle.txt", [1], False, "health Warning"),
    ("npu-smi", "info-a3-idle.txt", "proc-mem-busy.txt", [0], False, "No process in device"),
    ("npu-smi", "info-a2-idle.txt", "proc-mem-idle.txt", [7], False, "NPU 7 not listed"),
    ("nvidia-smi", "idle.txt", "", [0, 1], True, ""),
    ("nvidia-smi", "busy.txt", "", [0], False, "process 48211"),
    ("nvidia-smi", "busy.txt", "", [1], True, ""),
], ids=["a3-idle", "a2-idle", "a3-busy-aicore", "a3-health", "proc-mem-busy", "unknown-npu",
        "nv-idle", "nv-busy", "nv-other-gpu-busy"])
def test_check_idle(tool: str, info: str, proc: str, devs: list[int], idle: bool,
                    why: str) -> None:
    chk = devices.check_idle(tool, devs, run=_runner(info, proc))
    assert chk.idle is idle, chk.detail
    assert why in (chk.detail or "")


def test_tool_failure_is_not_idle() -> None:
    def boom(argv: Sequence[str]) -> str:
        raise RuntimeError("npu-smi info exited 255: dcmi module initialize failed")
    chk = devices.check_idle("npu-smi", [0], run=boom)
    assert not chk.idle and "dcmi" in (chk.detail or "")


def test_wait_idle_polls_until_idle() -> None:
    calls: list[int] = []

    def run(argv: Sequence[str]) -> str:
        calls.append(1)
        busy = len(calls) <= 2
        return _fx("nvidia-smi/busy.txt" if busy else "nvidia-smi/idle.txt")
    chk = devices.wait_idle("nvidia-smi", [0], timeout_s=60, poll_s=0, run=run,
                            sleep=lambda s: None)
    assert chk.idle and len(calls) == 3


def test_no_device_tool_is_recorded_as_not_idle_and_does_not_wait() -> None:
    """``--device-tool none`` never counts as an idle proof (a check that cannot fail)."""
    slept: list[float] = []
    chk = devices.wait_idle("none", [0], timeout_s=60, sleep=slept.append)
    assert chk.idle is False
    assert chk.detail is not None and "not checked" in chk.detail
    assert slept == []
