"""Operator probes on the device: time a control and a candidate callable on actual shapes,
compare their outputs, and write a ``campaign-bot/probe@1`` document
(:mod:`evidence.operator_probe`).

Python API: :func:`run_probe`.  Command line (a ``campaign_bot.cli`` plug-in)::

    campaign-bot probe run --control MOD:FN --candidate MOD:FN --inputs MOD:FN
        --probe-id ID --revision REV --out FILE [--device cpu|cuda[:N]|npu[:N]]
        [--warmups 3] [--repeats 10] [--control-op NAME] [--candidate-op NAME]
        [--campaign ID] [--candidate-name NAME] [--track ID] [--claims-lossless]

``MOD`` is an importable module or a ``.py`` file; ``--inputs`` names a function returning
the input tensors (a tensor, or a list/tuple of tensors), which are moved to ``--device``
and passed positionally to both callables.

Timing: every call is bracketed by a device synchronize (CUDA, Ascend NPU; nothing on the
CPU) and timed with ``time.perf_counter_ns``; warmup calls of both arms come first and are
kept apart; measured calls alternate control and candidate (ABAB...) so drift hits both arms
alike.  Under ``torch.distributed`` every rank probes its own device and the per-rank
results are gathered (``all_gather_object``), so each rank returns the same document.
Exactness is judged on the last measured outputs of each arm, per rank.

Exit codes of the command: 0 written (whatever the probe found: a probe is an observation),
2 bad usage or an arm that raised.

The probe models (:mod:`evidence.operator_probe`, pydantic) are imported by the functions
that build them, not at module level: ``campaign-bot --help`` imports this module (the
plug-in contract of :mod:`evidence.cli`).
"""

from __future__ import annotations

import importlib
import importlib.util
import platform
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from evidence.operator_probe import OperatorProbe, RankExactness, RankTiming, TensorSpec

TIMER = ("time.perf_counter_ns around each call, with a device synchronize before and after "
         "(none on the CPU); warmups of both arms first, measured calls alternating control "
         "and candidate")


class ProbeError(RuntimeError):
    """A probe could not run: bad callable path, bad inputs, or an arm that raised."""


def _torch() -> Any:
    import torch

    return torch


def _sync_fn(device: str) -> Callable[[], None]:
    torch = _torch()
    kind = device.split(":")[0]
    if kind == "cuda":
        return lambda: torch.cuda.synchronize(device)
    if kind == "npu":
        import torch_npu  # noqa: F401  (registers torch.npu)

        return lambda: torch.npu.synchronize(device)
    return lambda: None


def device_name(device: str) -> str:
    """A human name for ``device``: the GPU/NPU model, or the CPU's processor string."""
    torch = _torch()
    kind = device.split(":")[0]
    try:
        if kind == "cuda":
            return str(torch.cuda.get_device_name(device))
        if kind == "npu":
            return str(torch.npu.get_device_name(device))
    except (RuntimeError, AttributeError, AssertionError):
        pass
    return f"cpu ({platform.processor() or platform.machine()})"


def _flatten(out: Any) -> list[Any]:
    torch = _torch()
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, list | tuple):
        return [t for o in out for t in _flatten(o)]
    raise ProbeError(f"an arm returned {type(out).__name__}; return a tensor or a list/tuple "
                     "of tensors")


def tensor_spec(name: str, t: Any) -> TensorSpec:
    """The :class:`TensorSpec` of tensor ``t``."""
    from evidence.operator_probe import TensorSpec

    return TensorSpec(name=name, shape=list(t.shape), dtype=str(t.dtype).removeprefix("torch."))


def compare_outputs(rank: int, control: Any, candidate: Any) -> RankExactness:
    """Exactness of ``candidate`` against ``control`` (tensors or lists of tensors).

    Bit-exact: the same number of tensors, each with equal shape, dtype and bytes.  Max
    absolute difference in float64 over every element; relative: divided by the control's
    largest magnitude.  Non-finite values make ``finite`` False and the differences None.
    """
    from evidence.operator_probe import RankExactness

    torch = _torch()
    a, b = _flatten(control), _flatten(candidate)
    if len(a) != len(b):
        return RankExactness(rank=rank, bit_exact=False, finite=True, elements=0,
                             detail=f"{len(a)} control output(s), {len(b)} candidate output(s)")
    exact = True
    finite = True
    max_abs = 0.0
    scale = 0.0
    n = 0
    notes = []
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        x, y = x.detach(), y.detach()
        if x.shape != y.shape:
            return RankExactness(rank=rank, bit_exact=False, finite=True, elements=0,
                                 detail=f"output {i}: shapes {list(x.shape)} and "
                                 f"{list(y.shape)} differ")
        if x.dtype != y.dtype:
            exact = False
            notes.append(f"output {i}: dtypes {x.dtype} and {y.dtype}")
        elif exact:
            xb = x.contiguous().reshape(-1).view(torch.uint8)
            yb = y.contiguous().reshape(-1).view(torch.uint8)
            exact = bool(torch.equal(xb, yb))
        xd, yd = x.double().cpu(), y.double().cpu()
        if not (bool(torch.isfinite(xd).all()) and bool(torch.isfinite(yd).all())):
            finite = False
        elif xd.numel():
            max_abs = max(max_abs, float((xd - yd).abs().max()))
            scale = max(scale, float(xd.abs().max()))
        n += x.numel()
    if not finite:
        return RankExactness(rank=rank, bit_exact=exact, finite=False, elements=n,
                             detail="non-finite values in an output")
    rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else None)
    return RankExactness(rank=rank, bit_exact=exact, max_abs_diff=max_abs, max_rel_diff=rel,
                         finite=True, elements=n, detail="; ".join(notes) or None)


def _call(fn: Callable[..., Any], inputs: Sequence[Any], arm: str) -> Any:
    try:
        return fn(*inputs)
    except Exception as exc:  # noqa: BLE001 - reported with the arm's name
        raise ProbeError(f"the {arm} arm raised {type(exc).__name__}: {exc}") from exc


def measure_rank(control: Callable[..., Any], candidate: Callable[..., Any],
                 inputs: Sequence[Any], *, device: str, warmups: int, repeats: int, rank: int
                 ) -> tuple[list[RankTiming], RankExactness]:
    """Time both arms on this process's device and compare their last outputs."""
    from evidence.operator_probe import RankTiming

    if warmups < 0 or repeats < 1:
        raise ProbeError(f"need warmups >= 0 and repeats >= 1, got {warmups} and {repeats}")
    sync = _sync_fn(device)
    torch = _torch()
    arms = {"control": control, "candidate": candidate}
    warm: dict[str, list[float]] = {"control": [], "candidate": []}
    meas: dict[str, list[float]] = {"control": [], "candidate": []}
    last: dict[str, Any] = {}
    with torch.inference_mode():
        for arm, fn in arms.items():
            for _ in range(warmups):
                sync()
                t0 = time.perf_counter_ns()
                _call(fn, inputs, arm)
                sync()
                warm[arm].append((time.perf_counter_ns() - t0) / 1e6)
        for _ in range(repeats):
            for arm, fn in arms.items():
                sync()
                t0 = time.perf_counter_ns()
                last[arm] = _call(fn, inputs, arm)
                sync()
                meas[arm].append((time.perf_counter_ns() - t0) / 1e6)
    timings = [RankTiming(rank=rank, arm=arm, warmups_ms=warm[arm], samples_ms=meas[arm])
               for arm in arms]
    return timings, compare_outputs(rank, last["control"], last["candidate"])


def run_probe(
    control: Callable[..., Any],
    candidate: Callable[..., Any],
    inputs: Sequence[Any],
    *,
    probe_id: str,
    revision: str,
    control_op: str,
    candidate_op: str,
    device: str = "cpu",
    warmups: int = 3,
    repeats: int = 10,
    input_names: Sequence[str] | None = None,
    control_kernels: Sequence[str] = (),
    candidate_kernels: Sequence[str] = (),
    **meta: Any,
) -> OperatorProbe:
    """Probe ``candidate`` against ``control`` on ``inputs`` (tensors, passed positionally
    to both) and return the validated :class:`OperatorProbe`.

    ``device``: ``cpu``, ``cuda[:N]`` or ``npu[:N]`` (the inputs are moved there);
    ``warmups``/``repeats``: calls per arm and rank; ``meta``: ``campaign``,
    ``candidate_name``, ``track``, ``claims_lossless``, ``notes``, ``control_source``,
    ``candidate_source``.  Under an initialized ``torch.distributed`` process group, every
    rank must call this together; each returns the same document covering every rank.

    Raises :class:`ProbeError` when an arm raises or returns no tensor, and
    ``pydantic.ValidationError`` when the arguments make an invalid document.
    """
    from evidence.operator_probe import OperatorArm, OperatorProbe

    torch = _torch()
    dist = torch.distributed
    ready = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if ready else 0
    world = dist.get_world_size() if ready else 1
    moved = [t.to(device) for t in inputs]
    names = list(input_names or [f"input{i}" for i in range(len(moved))])
    if len(names) != len(moved):
        raise ProbeError(f"{len(names)} input name(s) for {len(moved)} input(s)")
    timings, exact = measure_rank(control, candidate, moved, device=device, warmups=warmups,
                                  repeats=repeats, rank=rank)
    with torch.inference_mode():
        outs = _flatten(control(*moved))
    local = (timings, exact, device_name(device))
    gathered: list[Any] = [local]
    if ready and world > 1:
        gathered = [None] * world
        dist.all_gather_object(gathered, local)
    all_t = [t for g in gathered for t in g[0]]
    all_e = [g[1] for g in gathered]
    names_seen = sorted({g[2] for g in gathered})
    csrc = meta.pop("control_source", None)
    ksrc = meta.pop("candidate_source", None)
    return OperatorProbe(
        probe_id=probe_id, revision=revision,
        control=OperatorArm(operator=control_op, kernels=list(control_kernels), source=csrc),
        candidate=OperatorArm(operator=candidate_op, kernels=list(candidate_kernels),
                              source=ksrc),
        inputs=[tensor_spec(n, t) for n, t in zip(names, moved, strict=True)],
        outputs=[tensor_spec(f"output{i}", t) for i, t in enumerate(outs)],
        device=" / ".join(names_seen), device_count=world, warmups=warmups, repeats=repeats,
        timer=TIMER, timings=all_t, exactness=all_e, created_at=datetime.now(UTC), **meta)


def load_callable(spec: str) -> Callable[..., Any]:
    """``module:function`` or ``path/to/file.py:function`` to the function.  Raises
    :class:`ProbeError` naming what is missing."""
    mod_name, sep, fn_name = spec.rpartition(":")
    if not sep or not mod_name or not fn_name:
        raise ProbeError(f"{spec!r}: expected MODULE:FUNCTION or FILE.py:FUNCTION")
    try:
        if mod_name.endswith(".py"):
            path = Path(mod_name)
            if not path.is_file():
                raise ProbeError(f"{spec!r}: no such file {path}")
            sp = importlib.util.spec_from_file_location(f"_probe_{path.stem}", path)
            if sp is None or sp.loader is None:
                raise ProbeError(f"{spec!r}: cannot load {path}")
            mod = importlib.util.module_from_spec(sp)
            sp.loader.exec_module(mod)
        else:
            mod = importlib.import_module(mod_name)
    except ProbeError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's module: report, never a traceback
        raise ProbeError(f"{spec!r}: importing {mod_name} raised {type(exc).__name__}: "
                         f"{exc}") from exc
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise ProbeError(f"{spec!r}: {mod_name} has no callable {fn_name!r}")
    return fn  # type: ignore[no-any-return]


def register(app: Any) -> None:
    """Add ``probe run`` to the ``campaign-bot`` typer app."""
    probe_app = typer.Typer(name="probe", help="Operator probes: time a candidate operator "
                            "against control on actual shapes (never a model gain).",
                            no_args_is_help=True, add_completion=False,
                            pretty_exceptions_enable=False)

    @probe_app.command("run")
    def run_cmd(
        control: Annotated[str, typer.Option(help="MODULE:FUNCTION or FILE.py:FUNCTION.")],
        candidate: Annotated[str, typer.Option(help="MODULE:FUNCTION or FILE.py:FUNCTION.")],
        inputs: Annotated[str, typer.Option(help="MODULE:FUNCTION returning the input "
                                            "tensor(s).")],
        probe_id: Annotated[str, typer.Option(help="Id of this probe, e.g. qkv-combined.")],
        revision: Annotated[str, typer.Option(help="Engine or code revision probed.")],
        out: Annotated[Path, typer.Option(help="Write the probe JSON here.")],
        device: Annotated[str, typer.Option(help="cpu, cuda[:N] or npu[:N].")] = "cpu",
        warmups: Annotated[int, typer.Option(min=0, help="Warmup calls per arm.")] = 3,
        repeats: Annotated[int, typer.Option(min=1, help="Measured calls per arm.")] = 10,
        control_op: Annotated[str | None, typer.Option(help="Operator name (default: the "
                                                       "function's).")] = None,
        candidate_op: Annotated[str | None, typer.Option(help="Operator name.")] = None,
        campaign: Annotated[str | None, typer.Option(help="Campaign id.")] = None,
        candidate_name: Annotated[str | None, typer.Option(
            help="The campaign candidate this probe screens.")] = None,
        track: Annotated[str | None, typer.Option(help="Track the candidate targets.")] = None,
        claims_lossless: Annotated[bool, typer.Option(
            "--claims-lossless", help="Offer the candidate as lossless (exact).")] = False,
    ) -> None:
        """Time CANDIDATE against CONTROL on the inputs and write a probe document."""
        from pydantic import ValidationError
        from rich.console import Console
        from rich.markup import escape

        err = Console(stderr=True, soft_wrap=True)
        try:
            fc, fk, fi = (load_callable(s) for s in (control, candidate, inputs))
            got = fi()
            tensors = got if isinstance(got, list | tuple) else [got]
            meta: dict[str, Any] = {
                k: v for k, v in (("campaign", campaign), ("candidate_name", candidate_name),
                                  ("track", track)) if v is not None}
            doc = run_probe(fc, fk, tensors, probe_id=probe_id, revision=revision,
                            control_op=control_op or control.rpartition(":")[2],
                            candidate_op=candidate_op or candidate.rpartition(":")[2],
                            device=device, warmups=warmups, repeats=repeats,
                            claims_lossless=claims_lossless, **meta)
        except (ProbeError, ValidationError) as exc:
            err.print(f"[red]error:[/] cannot probe: {escape(str(exc))}")
            raise typer.Exit(2) from None
        except ImportError as exc:  # torch (the [media] extra), or a module the arms import
            name = getattr(exc, "name", None) or str(exc)
            hint = (": probes time tensors with torch; install the [media] extra "
                    "(pip install 'campaign-bot[media]'), or [npu] as well on Ascend"
                    if str(name).split(".")[0] in ("torch", "torch_npu") else "")
            err.print(f"[red]error:[/] cannot import {escape(str(name))}{escape(hint)}",
                      soft_wrap=True)
            raise typer.Exit(2) from None
        except (RuntimeError, AttributeError, TypeError) as exc:  # device or inputs
            err.print(f"[red]error:[/] cannot probe: {type(exc).__name__}: {escape(str(exc))}")
            raise typer.Exit(2) from None
        text = doc.model_dump_json(indent=2, by_alias=True) + "\n"
        try:
            from evidence.safejson import write_atomic

            write_atomic(out, text)
        except OSError as exc:
            err.print(f"[red]error:[/] cannot write {escape(str(out))}: {escape(str(exc))}")
            raise typer.Exit(2) from None
        con = Console(highlight=False)
        if not con.is_terminal:
            con.width = 160
        _render(doc, con)
        raise typer.Exit(0)

    app.add_typer(probe_app, name="probe")


def _render(doc: OperatorProbe, console: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=f"probe {escape(doc.probe_id)}: {escape(doc.control.operator)} vs "
              f"{escape(doc.candidate.operator)} ({doc.device_count}x {escape(doc.device)}; "
              "ms)", title_justify="left")
    for col in ("rank", "control median", "candidate median", "ratio", "bit-exact",
                "max abs diff", "finite"):
        t.add_column(col, justify="right")
    c_med, k_med = doc.medians_ms("control"), doc.medians_ms("candidate")
    for e in sorted(doc.exactness, key=lambda e: e.rank):
        c, k = c_med[e.rank], k_med[e.rank]
        t.add_row(str(e.rank), f"{c:.3f}", f"{k:.3f}", f"{k / c:.3f}x" if c > 0 else "—",
                  "yes" if e.bit_exact else "[red]no[/]",
                  "—" if e.max_abs_diff is None else f"{e.max_abs_diff:.3g}",
                  "yes" if e.finite else "[red]no[/]")
    console.print(t)
    console.print("an operator observation, not a model gain: end-to-end gains come only from "
                  "a screen's receipts and verdict")
