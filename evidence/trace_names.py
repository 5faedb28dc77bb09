"""Which profiler-trace events are device kernels, and which kernels are communication.

The defaults of :func:`evidence.trace_summary.summarize` and of ``campaign-bot trace
summarize``; standard library only, so the command's plug-in module (:mod:`evidence.trace_cli`)
can name them in its options without importing the trace-summary models (the plug-in
contract of :mod:`evidence.cli`).
"""

from __future__ import annotations

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
"""torch.profiler categories of device work (CUDA kernels, copies and sets)."""
DEVICE_PROCESS = r"^(ascend hardware|gpu\s*\d*|npu\s*\d*)$"
"""Process names (``M`` ``process_name`` events) whose events are device tasks: msprof's
"Ascend Hardware"; msprof's "Overlap Analysis" process is its own derived view and is not
a device."""
COMM_PATTERN = (r"all[-_ ]?to[-_ ]?all|all[-_ ]?gather|all[-_ ]?reduce|reduce[-_ ]?scatter|"
                r"broadcast|nccl|hccl|hcom|c10d|gloo|sendrecv|send_recv|notify")
"""Kernel names that are collective communication (NCCL, HCCL, gloo, c10d), case-insensitive;
campaign #320's rank-0 trace names All-to-All and AllGather."""
