"""Numeric precision of every stage that runs the model: one setting, ``base.precision``.

``auto`` resolves to bf16 where the hardware computes bfloat16 natively and to fp32
elsewhere; ``bf16`` and ``fp32`` force one. What bf16 means, stage by stage:

- **training** (midtrain, sft, rl): the standard mixed-precision recipe. Master weights
  and optimizer state stay float32; the forward runs under ``torch.autocast`` in bf16;
  the head's logits are cast to float32 before log-softmax (``model/logprobs.py``), so
  log-probs, losses, advantages and the PPO ratio are float32. On a GPU DeepSpeed's own
  bf16 mode holds the weights in bf16 (its optimizer keeps float32 masters); the same
  resolved setting turns it on (``train/loop.py: ds_config``), and autocast over bf16
  weights changes nothing.
- **generation** (the ``hf`` engine in rl and eval, the sft format check, BFCL): a model
  whose weights are bf16 (:func:`generation_model`). The rl engine keeps a bf16 copy of
  the module DeepSpeed updates and refreshes it after every update.

Why only native bf16: on this project's reference CPU (AMD EPYC with ``avx512_bf16``, 2
cores, torch 2.13) a 2048x576 by 576x1536 matmul runs at 175 GFLOP/s in float32 and 777
in bf16, and a SmolLM2-135M training step at 2.1x the float32 tokens/s; a CPU without
the instructions emulates bf16 at a fraction of float32's speed, so ``auto`` stays on
float32 there and a forced ``bf16`` is refused.
"""

from __future__ import annotations

import copy
import os
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Literal

import torch

Requested = Literal["auto", "fp32", "bf16"]
Resolved = Literal["fp32", "bf16"]
DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}
# CPU flags (/proc/cpuinfo) of native bf16 arithmetic: AVX512-BF16 (Cooper Lake, Zen 4 and
# later) and AMX-BF16 (Sapphire Rapids and later). Other CPUs are not measured: fp32.
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
# oneDNN (torch's CPU bf16 kernels) capped below AVX512_CORE_BF16 by ONEDNN_MAX_CPU_ISA
# emulates bf16 even where the CPU has it: such a process counts as having none.
ISA_WITHOUT_BF16 = frozenset(
    {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}
)


class PrecisionError(ValueError):
    """A forced precision the hardware cannot run natively."""


def device_type() -> str:
    """Where the model runs: ``cuda`` when a GPU is visible, else ``cpu``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def first_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The fields of the first CPU in ``cpuinfo`` (empty where there is none)."""
    try:
        first = cpuinfo.read_text().split("\n\n")[0]
    except OSError:
        return {}
    return dict(
        (key.strip(), value.strip())
        for key, _, value in (line.partition(":") for line in first.splitlines())
    )


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The instruction-set flags of the first CPU in ``cpuinfo`` (empty where there is none)."""
    return frozenset(first_cpu(cpuinfo).get("flags", "").split())


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    r"""The first CPU's kind: model name, family and model numbers, and its native bf16
    flags. bf16 stages reproduce their bytes only on the same kind of CPU (an AMX Xeon and
    an AVX512-BF16 EPYC run other kernels), and a CPU without them runs every stage in
    fp32, so results that pin a model's digest name it; the name alone ("AMD EPYC") is
    shared by generations with and without bf16.

    >>> import tempfile
    >>> info = Path(tempfile.mkdtemp()) / "cpuinfo"
    >>> _ = info.write_text("cpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n"
    ...                     "flags\t\t: fpu avx512f avx512_bf16\n")
    >>> cpu_model(info)
    'AMD EPYC (family 25 model 17, avx512_bf16)'
    >>> _ = info.write_text("model name\t: AMD EPYC\nflags\t\t: fpu avx2\n")
    >>> cpu_model(info)
    'AMD EPYC (no native bf16)'
    """
    fields = first_cpu(cpuinfo)
    if not fields:
        return "unknown"
    name = fields.get("model name", "unknown")
    numbers = (
        [f"family {fields['cpu family']} model {fields['model']}"]
        if "cpu family" in fields and "model" in fields
        else []
    )
    bf16 = sorted(frozenset(fields.get("flags", "").split()) & NATIVE_BF16_FLAGS)
    return f"{name} ({', '.join([*numbers, ' '.join(bf16) or 'no native bf16'])})"


def native_bf16(device: str) -> bool:
    """Does ``device`` compute bfloat16 natively (not emulated)?"""
    if device == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    if os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper() in ISA_WITHOUT_BF16:
        return False
    return bool(cpu_flags() & NATIVE_BF16_FLAGS)


def resolve(requested: Requested, device: str, native: bool) -> Resolved:
    """The precision a stage runs at.

    >>> resolve("auto", "cpu", native=True), resolve("auto", "cpu", native=False)
    ('bf16', 'fp32')
    >>> resolve("fp32", "cuda", native=True)
    'fp32'
    >>> resolve("bf16", "cpu", native=False)
    Traceback (most recent call last):
    ...
    agentrl.precision.PrecisionError: bf16 needs native bfloat16 arithmetic, which this cpu lacks ...
    """
    if requested == "auto":
        return "bf16" if native else "fp32"
    if requested == "bf16" and not native:
        raise PrecisionError(
            f"bf16 needs native bfloat16 arithmetic, which this {device} lacks (a CPU with "
            f"{' or '.join(sorted(NATIVE_BF16_FLAGS))}, or a GPU with bf16); use auto or fp32"
        )
    return requested


def stage_precision(requested: Requested, params_file: str) -> Resolved:
    """``base.precision`` resolved on this machine; a ConfigError naming the key if the
    hardware cannot run it (before the stage writes anything)."""
    from agentrl.config import ConfigError

    device = device_type()
    try:
        return resolve(requested, device, native_bf16(device))
    except PrecisionError as err:
        raise ConfigError(f"{params_file}: base.precision: {requested!r}: {err}") from None


def autocast(precision: Resolved) -> AbstractContextManager[Any]:
    """The forward pass's mixed-precision context: bf16 autocast, or nothing for fp32."""
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device_type(), dtype=torch.bfloat16)


def generation_model(model: Any, precision: Resolved) -> Any:
    """The model generation runs: ``model`` itself when its dtype already is the
    precision's, else an eval-mode copy in that dtype (the caller's weights untouched)."""
    dtype = DTYPES[precision]
    if model.dtype == dtype:
        return model
    return copy.deepcopy(model).to(dtype).eval()
