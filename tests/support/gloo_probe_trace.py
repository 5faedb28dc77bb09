"""Two CPU ranks over gloo: each profiles a small "main-denoise" region (matmuls and
all_reduce) with torch.profiler and exports its Chrome trace, then both run one operator
probe together.  Used by tests/test_probe_trace_gloo.py: ``python gloo_probe_trace.py OUT PORT``.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, record_function


def _work(rank: int, world: int, out: str, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    x = torch.randn(96, 96)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("main-denoise"):
            for _ in range(3):
                y = torch.relu(x @ x)
                dist.all_reduce(y)
    prof.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))
    from runners.probe import ProbeSettings, run_probe

    def split(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        # rank 1's candidate sums in another order: not bit-exact there
        return (a @ b) if rank == 0 else (a.double() @ b.double()).float()

    doc = run_probe(torch.mm, split, [x, x.t().contiguous()], probe_id="gloo-mm",
                    revision="test", control_op="torch.mm", candidate_op="split",
                    # the ranks want 3 and 4 measured calls: they agree on 4
                    settings=ProbeSettings(warmups=1, repeats=rank + 3, budget_s=None))
    if rank == 0:
        with open(os.path.join(out, "probe.json"), "w") as f:
            f.write(doc.model_dump_json(by_alias=True, indent=2))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(_work, args=(2, sys.argv[1], int(sys.argv[2])), nprocs=2)
