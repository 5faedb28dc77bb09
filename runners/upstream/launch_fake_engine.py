"""Run vLLM-Omni's real ``vllm serve MODEL --omni`` with a small in-process fake engine.

Usage (with the upstream contract environment's interpreter)::

    <venv>/bin/python runners/upstream/launch_fake_engine.py serve MODEL_DIR --omni \\
        [vLLM-Omni flags] --host 127.0.0.1 --port 8091
    <venv>/bin/python runners/upstream/launch_fake_engine.py --check-flags COMMANDS.json
    <venv>/bin/python runners/upstream/launch_fake_engine.py --list-flags

The environment is built by ``runners/upstream/install-contract-venv.sh``.  Only one function
of vLLM-Omni is replaced: ``build_async_omni`` in
``vllm_omni/entrypoints/openai/api_server.py`` (vLLM-Omni 0.30.0), the async context manager
that starts the stages and their diffusion workers.  Here it yields :class:`FakeAsyncOmni`,
which answers ``generate()`` with the output shape of MiniMax H3's post-processing
(``OmniRequestOutput.from_diffusion`` with uint8 frames ``(T, H, W, 3)``, float32 stereo audio
``(1, 2, N)`` at 32 kHz and the fps), so upstream's own code parses the form, checks the
references, muxes the MP4 (H.264 + AAC), sets the headers, maps errors to HTTP statuses and
runs uvicorn's start-up and SIGTERM shutdown.  Nothing spawns worker processes: the worker
shutdown ladder is not exercised here (``runners.standin`` simulates it).

``MODEL_DIR`` must be a local directory holding ``model_index.json`` with
``"_class_name": "MiniMaxH3Pipeline"`` (upstream's ``validate()`` reads it to detect a
diffusion model, ``vllm_omni/entrypoints/cli/serve.py``); ``HF_HUB_OFFLINE=1`` is set unless
given, so a non-local name fails fast instead of retrying hub look-ups.

Fault modes, chosen by environment variables (the real argument parser refuses unknown flags,
so they cannot be flags):

``CAMPAIGN_BOT_FAKE_ENGINE_FAULT``
    ``none`` (default); ``slow`` (generation sleeps past ``VLLM_OMNI_VIDEO_SYNC_TIMEOUT``:
    HTTP 504); ``error`` (``EngineGenerateError``: HTTP 500, the server stays up);
    ``dead`` (``EngineDeadError`` with the engine marked errored: HTTP 500, then the server
    shuts itself down and exits 0 unless ``VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1``);
    ``client-error`` (``OmniClientError``, how H3 rejects a bad reference set: HTTP 400).
``CAMPAIGN_BOT_FAKE_ENGINE_FAULT_ON``
    1-based number of the request that faults (default 0: every request).
``CAMPAIGN_BOT_FAKE_ENGINE_GEN_S``
    simulated generation seconds per request (default 0.05).
``CAMPAIGN_BOT_FAKE_ENGINE_MAX_FRAMES``
    cap on the number of frames returned (default 48), for speed.

``--check-flags COMMANDS.json`` (``{"commands": [["serve", MODEL, "--omni", ...], ...]}``)
parses each command line with upstream's ``vllm serve --omni`` parser, without reading the
model or starting anything, and prints one line ``CAMPAIGN_BOT_CHECK_FLAGS {json}`` with an
exit status (0 accepted, 2 refused) and argparse's message per command.  ``--list-flags``
prints ``CAMPAIGN_BOT_SERVE_FLAGS {json}``: every option of that parser and how many values
it takes (the source of ``runners/upstream/serve-flags.json``).

This file runs under the contract environment's interpreter, not campaign-bot's: it imports
only the standard library and what vLLM-Omni itself needs.
"""

from __future__ import annotations

import asyncio
import importlib.abc
import importlib.machinery
import json
import os
import sys
import tempfile
import types
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

FAULT_ENV = "CAMPAIGN_BOT_FAKE_ENGINE_FAULT"
FAULT_ON_ENV = "CAMPAIGN_BOT_FAKE_ENGINE_FAULT_ON"
GEN_S_ENV = "CAMPAIGN_BOT_FAKE_ENGINE_GEN_S"
MAX_FRAMES_ENV = "CAMPAIGN_BOT_FAKE_ENGINE_MAX_FRAMES"
FAULTS = ("none", "slow", "error", "dead", "client-error")
AUDIO_RATE = 32000
"""MiniMax H3 output audio: stereo 32 kHz (``pipeline_minimax_h3.py:167-168``)."""

STUBBED = ("torchvision", "torchaudio")
"""Imported at module level by vLLM-Omni 0.30.0 (model registry -> transformers' Qwen2-VL
image processor; ``entrypoints/openai/audio_utils_mixin.py:28``), never called on the
``/v1/videos/sync`` path.  PyPI's builds link CUDA libraries and do not load beside the CPU
torch 2.13.0 that vLLM 0.30.0 pins, so they are replaced by import-time stand-ins."""


# ------------------------------------------------------------------- import-time stand-ins


class _StubAttr:
    """Any attribute of a stand-in module: attribute access chains, subclassing works, and
    any call raises RuntimeError naming the attribute (no call is expected)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return _StubAttr(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self._name} is an import-time stand-in and was called "
                           "(launch_fake_engine.py replaces torchvision/torchaudio)")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)

    def __iter__(self) -> Any:
        return iter(())

    def __bool__(self) -> bool:
        return False


class _StubModule(types.ModuleType):
    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return _StubAttr(f"{self.__name__}.{attr}")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Meta-path finder that answers the ``names`` packages and their submodules."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        mod = _StubModule(spec.name)
        mod.__path__ = []
        mod.__version__ = "0.0.0+stand-in"  # type: ignore[attr-defined]
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def install_stubs() -> None:
    """Put the stand-in finder first on ``sys.meta_path`` for those of torchvision and
    torchaudio that are not installed (a real installation is left alone).  Idempotent."""
    import importlib.util

    missing = tuple(m for m in STUBBED if importlib.util.find_spec(m) is None)
    if missing and not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _StubFinder(missing))


# ------------------------------------------------------------------------------ fake engine


def _env_number(name: str, default: str, *, minimum: float) -> float:
    """A number from the environment; exits naming the variable when it is not one."""
    raw = os.environ.get(name, default)
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"{name}={raw!r}: not a number") from None
    if not minimum <= value < float("inf"):  # NaN fails too
        raise SystemExit(f"{name}={raw!r}: must be a finite number >= {minimum:g}")
    return value


class FakeAsyncOmni:
    """The attributes upstream's HTTP layer reads from a pure-diffusion ``AsyncOmni``.

    ``stage_configs`` has the dict shape of ``config_factory.create_default_diffusion``;
    ``od_config.model_class_name = "MiniMaxH3Pipeline"`` makes upstream apply MiniMax H3's
    capability metadata (mixed references, upload rules and limits)."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.stage_configs = [{
            "stage_id": 0, "stage_type": "diffusion",
            "engine_args": {"model_class_name": "MiniMaxH3Pipeline", "model_stage": "diffusion"},
            "default_sampling_params": {}, "final_output": True, "final_output_type": "video",
        }]
        self.od_config = types.SimpleNamespace(model_class_name="MiniMaxH3Pipeline",
                                               model=model, revision=None)
        self.vllm_config = None
        self.model_config = None
        self.input_processor = None
        self.renderer = None
        self.io_processor = None
        self.endpoint_restrictions: tuple[str, ...] = ()
        self.default_sampling_params_list: list[Any] = []
        self.fault = os.environ.get(FAULT_ENV, "none")
        if self.fault not in FAULTS:
            raise SystemExit(f"{FAULT_ENV}={self.fault!r}: use one of {', '.join(FAULTS)}")
        self.fault_on = int(_env_number(FAULT_ON_ENV, "0", minimum=0))
        self.gen_s = _env_number(GEN_S_ENV, "0.05", minimum=0.0)
        self.max_frames = int(_env_number(MAX_FRAMES_ENV, "48", minimum=1))
        self.requests = 0
        self._errored = False
        self._stopped = False

    # -- what upstream calls
    def get_diffusion_od_config(self) -> Any:
        return self.od_config

    async def get_vllm_config(self) -> None:
        return None

    async def get_supported_tasks(self) -> tuple[str, ...]:
        return ("generate",)

    async def check_health(self) -> None:
        if self._errored:
            from vllm.v1.engine.exceptions import EngineDeadError

            raise EngineDeadError()

    @property
    def errored(self) -> bool:
        return self._errored

    @property
    def is_running(self) -> bool:
        return not self._errored and not self._stopped

    @property
    def dead_error(self) -> BaseException:
        """vLLM's ``EngineClient.dead_error``: the exception a dead engine raises."""
        from vllm.v1.engine.exceptions import EngineDeadError

        return EngineDeadError()

    async def abort(self, request_id: Any, timeout: float | None = None) -> None:
        return None

    def shutdown(self, *args: Any, **kwargs: Any) -> None:
        self._stopped = True

    async def generate(self, prompt: Any, request_id: str,
                       sampling_params_list: Sequence[Any]) -> AsyncIterator[Any]:
        """Yield one finished diffusion output, or raise the configured fault."""
        import numpy as np
        from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError
        from vllm_omni.errors import OmniClientError
        from vllm_omni.outputs import OmniRequestOutput

        self.requests += 1
        faulty = self.fault != "none" and self.fault_on in (0, self.requests)
        if faulty and self.fault == "dead":
            self._errored = True
            raise EngineDeadError()
        if faulty and self.fault == "error":
            raise EngineGenerateError()
        if faulty and self.fault == "client-error":
            raise OmniClientError("ref2va requires at least one image or video reference "
                                  "(fake engine fault)")
        _check_ref2va_counts(prompt, sampling_params_list[-1])
        gen = self.gen_s
        if faulty and self.fault == "slow":
            from vllm_omni.entrypoints.openai.video.generation.helpers import (
                VIDEO_SYNC_TIMEOUT_S,
            )

            gen = VIDEO_SYNC_TIMEOUT_S + 5.0
        await asyncio.sleep(gen)
        sp = sampling_params_list[-1]
        extra = getattr(sp, "extra_args", None) or {}
        width = int(getattr(sp, "width", None) or 1344)
        height = int(getattr(sp, "height", None) or 768)
        fps = float(getattr(sp, "fps", None) or 24.0)
        duration = float(extra.get("duration", 5.0))
        seed = 42 if getattr(sp, "seed", None) is None else int(sp.seed)  # 0 is honoured
        frames = max(1, min(self.max_frames, int(round(duration * fps))))
        rng = np.random.default_rng(seed)
        base = rng.integers(0, 255, size=(height, width, 3), dtype=np.uint8)
        video = np.stack([np.roll(base, shift=2 * i, axis=1) for i in range(frames)])
        n = int(round(frames / fps * AUDIO_RATE))
        t = np.arange(n, dtype=np.float32) / AUDIO_RATE
        tone = (0.1 * np.sin(2 * np.pi * (220 + seed % 200) * t)).astype(np.float32)
        audio = np.stack([tone, tone])[None, ...]
        yield OmniRequestOutput.from_diffusion(
            request_id, images=[],
            multimodal_output={"video": [video], "audio": audio,
                               "audio_sample_rate": AUDIO_RATE, "fps": fps},
            final_output_type="video",
            stage_durations={"diffuse": round(gen, 6)}, peak_memory_mb=1024.0)


def _check_ref2va_counts(prompt: Any, sp: Any) -> None:
    """MiniMax H3's Ref2VA reference-count rule, which upstream applies in the model, not the
    HTTP layer (``model_executor/models/minimax_h3/encoder_processing.py``,
    ``_validate_ref2va_reference_counts``): raises ``OmniClientError`` (HTTP 400)."""
    from vllm_omni.errors import OmniClientError

    extra = getattr(sp, "extra_args", None) or {}
    if extra.get("task") != "ref2va":
        return
    mm = prompt.get("multi_modal_data", {}) if isinstance(prompt, dict) else {}

    def count(key: str) -> int:
        v = mm.get(key)
        return 0 if v is None else len(v) if isinstance(v, list | tuple) else 1

    images, videos, audios = count("image"), count("video"), count("audio")
    if images + videos == 0:
        raise OmniClientError("ref2va requires at least one image or video reference")
    if images > 9:
        raise OmniClientError("ref2va accepts at most 9 image references")
    if videos > 3:
        raise OmniClientError("ref2va accepts at most 3 video references")
    if audios > 3:
        raise OmniClientError("ref2va accepts at most 3 standalone audio references")


@asynccontextmanager
async def fake_build_async_omni(args: Any, *, disable_frontend_multiprocessing: Any = None,
                                client_config: Any = None) -> AsyncIterator[FakeAsyncOmni]:
    """Drop-in for ``api_server.build_async_omni``: yields a :class:`FakeAsyncOmni`."""
    engine = FakeAsyncOmni(args.model)
    try:
        yield engine
    finally:
        engine.shutdown()


# ------------------------------------------------------------------------------------ main


LIST_MARK = "CAMPAIGN_BOT_SERVE_FLAGS "
CHECK_MARK = "CAMPAIGN_BOT_CHECK_FLAGS "
"""Prefixes of the one JSON line ``--list-flags`` / ``--check-flags`` print on stdout (vLLM
logs to stdout too)."""


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    return {"vllm_omni": md.version("vllm-omni"), "vllm": md.version("vllm")}


def _stop_after_parsing(on_parsed: Any) -> None:
    """Make ``vllm serve --omni`` call ``on_parsed(args)`` instead of starting a server, and
    skip ``validate()`` (it reads the model directory, which a flag check does not need)."""
    from vllm_omni.entrypoints.cli import serve

    serve.OmniServeCommand.cmd = staticmethod(on_parsed)  # type: ignore[method-assign]
    serve.OmniServeCommand.validate = lambda self, args: None  # type: ignore[method-assign]


def list_flags() -> dict[str, Any]:
    """Every option of upstream's ``vllm serve --omni`` parser: ``{"vllm_omni": version,
    "vllm": version, "actions": [{"options": ["--ulysses-degree", "--usp"], "nargs": 1},
    ...]}``; ``nargs`` is argparse's (0 for a switch, 1 for one value, ``"?"``/``"*"``/
    ``"+"``)."""
    from vllm_omni.entrypoints.cli import serve
    from vllm_omni.entrypoints.cli.main import main as omni_main

    table: dict[str, Any] = {}

    def _dump(args: Any) -> None:
        actions = []
        for action in serve.OmniServeCommand._parser._actions:
            if not action.option_strings:
                continue
            nargs = action.nargs
            actions.append({"options": sorted(action.option_strings),
                            "nargs": 1 if nargs is None else nargs})
        table["actions"] = sorted(actions, key=lambda a: a["options"][0])

    _stop_after_parsing(_dump)
    sys.argv = ["vllm", "serve", "model", "--omni"]
    omni_main()
    return {**_versions(), "actions": table["actions"]}


def check_flags(commands: list[list[str]]) -> list[dict[str, Any]]:
    """Parse each command line (``["serve", MODEL, "--omni", flags...]``) with upstream's
    parser; one ``{"exit": 0|2, "stderr": text}`` per command (argparse's message on an
    unknown flag or a bad value)."""
    import contextlib
    import io

    from vllm_omni.entrypoints.cli.main import main as omni_main

    _stop_after_parsing(lambda args: None)
    results = []
    for argv in commands:
        err = io.StringIO()
        code: Any = 0
        sys.argv = ["vllm", *argv]
        with contextlib.redirect_stderr(err):
            try:
                omni_main()
            except SystemExit as exc:
                code = exc.code
            except Exception as exc:  # noqa: BLE001 - reported, the next command still runs
                code, _ = 1, err.write(f"{type(exc).__name__}: {exc}\n")
        results.append({"exit": code if isinstance(code, int) else 1,
                        "stderr": err.getvalue()[-2000:]})
    return results


def main(argv: list[str] | None = None) -> None:
    """Entry point; ``argv`` defaults to ``sys.argv[1:]``.  Exits like ``vllm serve``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    install_stubs()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if argv[:1] == ["--list-flags"]:
        sys.stdout.write(LIST_MARK + json.dumps(list_flags()) + "\n")
        return
    if argv[:1] == ["--check-flags"]:
        if len(argv) != 2:
            raise SystemExit("usage: launch_fake_engine.py --check-flags COMMANDS.json")
        with open(argv[1], encoding="utf-8") as fh:
            commands = json.load(fh)["commands"]
        sys.stdout.write(CHECK_MARK + json.dumps({**_versions(),
                                                  "results": check_flags(commands)}) + "\n")
        return
    os.environ.setdefault("VLLM_OMNI_SERVER_STORAGE__PATH",
                          tempfile.mkdtemp(prefix="vllm-omni-storage-"))
    import vllm_omni.entrypoints.openai.api_server as api_server

    api_server.build_async_omni = fake_build_async_omni  # type: ignore[assignment]
    sys.argv = ["vllm", *argv]
    from vllm_omni.entrypoints.cli.main import main as omni_main

    omni_main()


if __name__ == "__main__":
    main()
