"""Which profiler-trace events are device kernels, which kernels are communication or copies,
which annotations are device-side, and how kernel names are shortened.

The defaults of :func:`evidence.trace_summary.summarize` and of ``campaign-bot trace
summarize``; standard library only, so the command's plug-in module (:mod:`evidence.trace_cli`)
can name them in its options without importing the trace-summary models (the plug-in
contract of :mod:`evidence.cli`).
"""

from __future__ import annotations

import re

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
_COPY_NAME = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
COPY_CATS = ("gpu_memcpy", "gpu_memset")
"""torch.profiler categories of copies and memsets: their own class, not compute (Holistic
Trace Analysis calls them MEMORY kernels)."""
COPY_PATTERN = r"^(memcpy|memset|dma)|memcpy_?async|memset_?async"
"""Device task names that are copies or memsets, case-insensitive: CUDA's ``Memcpy HtoD
(Pinned -> Device)``, ``Memset (Device)`` (the prefixes Holistic Trace Analysis's
``MEMORY_KERNEL_RE`` matches) and Ascend's ``MEMCPY_ASYNC`` task type."""
DEVICE_ANNOTATION_CATS = ("gpu_user_annotation",)
"""Categories of device-side copies of ``record_function`` ranges: torch.profiler writes a
``gpu_user_annotation`` on the GPU timeline spanning the kernels a range launched, beside
the host-side ``user_annotation``."""


def short_kernel_name(name: str) -> str:
    """A kernel name with template arguments, parameter lists and the return type folded
    away, as Nsight Systems' base names and Holistic Trace Analysis's ``shorten_name``
    (``hta.utils.utils``) print them: ``void at::native::vectorized_elementwise_kernel<4,
    at::native::FillFunctor<float>, ...>(int, ...)`` -> ``at::native::
    vectorized_elementwise_kernel``.  Copy and memset names (``Memcpy HtoD (Pinned ->
    Device)``) and names without ``<`` or ``(`` are kept whole."""
    if _COPY_NAME.match(name) or ("<" not in name and "(" not in name):
        return name
    stack: list[str] = []
    for c in name.replace("->", ""):
        if c in ">)":
            opener = "<" if c == ">" else "("
            while stack and stack[-1] != opener:
                stack.pop()
            if stack:
                stack.pop()
        else:
            stack.append(c)
    short = "".join(stack).split(" ")[-1]
    return short or name


