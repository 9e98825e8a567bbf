"""Typed, strict configuration: one pydantic model per ``params.yaml`` section.

Every stage loads its parameters only through :func:`load_params`. Unknown keys and wrong
types are errors; :class:`ConfigError` carries one message naming the file, the dotted key
and the problem, and stage entry points turn it into exit code 2 before writing anything.

One module per group of sections: ``base`` (the strict base model, split names, errors),
``synth``, ``training`` (model, midtrain, sft), ``harness``, ``rl`` (rl, pivots and the rules
tying rl to its engine), ``eval`` (eval, BFCL). This module holds :class:`Params`, the rules
that span sections, and :func:`load_params`; every name is importable from here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import PrivateAttr, ValidationError, model_validator

from agentrl.config.base import (
    BUILTIN_FAMILIES,
    DEFAULT_PARAMS,
    EVAL_SPLITS,
    SPLITS,
    TRACE_SPLITS,
    TRAIN_SPLITS,
    BaseSection,
    ConfigError,
    Paths,
    Strict,
    TrackingSection,
    digest,
    dotted,
    import_plugin,
)
from agentrl.config.eval import BFCLSection, EvalSection, EvalVariant
from agentrl.config.harness import CONTEXT_STRATEGIES, ContextStrategy, HarnessSection
from agentrl.config.rl import PivotsSection, RLSection, rl_engine_rule, rl_world_rule
from agentrl.config.synth import Difficulty, IntRange, SplitSection, SynthSection, TeacherSection
from agentrl.config.training import (
    LORA_TARGETS,
    FormatCheckSection,
    LoraSection,
    MidtrainSection,
    ModelSection,
    SftSection,
    TrainSection,
)

__all__ = [
    "BUILTIN_FAMILIES",
    "CONTEXT_STRATEGIES",
    "DEFAULT_PARAMS",
    "EVAL_SPLITS",
    "LORA_TARGETS",
    "SPLITS",
    "TRACE_SPLITS",
    "TRAIN_SPLITS",
    "BFCLSection",
    "BaseSection",
    "ConfigError",
    "ContextStrategy",
    "Difficulty",
    "EvalSection",
    "EvalVariant",
    "FormatCheckSection",
    "HarnessSection",
    "IntRange",
    "LoraSection",
    "MidtrainSection",
    "ModelSection",
    "Params",
    "Paths",
    "PivotsSection",
    "RLSection",
    "SftSection",
    "SplitSection",
    "Strict",
    "SynthSection",
    "TeacherSection",
    "TrackingSection",
    "TrainSection",
    "digest",
    "import_plugin",
    "load_params",
    "rl_engine_rule",
    "rl_world_rule",
]  # fmt: skip


class Params(Strict):
    base: BaseSection = BaseSection()
    tracking: TrackingSection = TrackingSection()
    synth: SynthSection
    model: ModelSection = ModelSection()
    midtrain: MidtrainSection = MidtrainSection()
    sft: SftSection = SftSection()
    harness: HarnessSection = HarnessSection()
    pivots: PivotsSection = PivotsSection()
    rl: RLSection = RLSection()
    eval: EvalSection = EvalSection()
    _file: str = PrivateAttr("params.yaml")

    @property
    def file(self) -> str:
        """The file these params were read from: the start of every error message."""
        return self._file

    def section_dict(self, name: str) -> dict[str, Any]:
        return getattr(self, name).model_dump(mode="json")

    @model_validator(mode="after")
    def _rl_on_its_engine(self) -> Params:
        if problem := rl_engine_rule(self.rl, self.harness):
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _pivots_within_synth(self) -> Params:
        """The pivots stage reads trajectories of a split synth writes (checked when the
        params write a pivots section or rl draws from pivots)."""
        split = self.pivots.split
        if "pivots" not in self.model_fields_set and self.rl.rollouts == "episodes":
            return self
        if split not in self.synth.splits or not self.synth.splits[split].n:
            raise ValueError(
                f"pivots.split: {split!r} has no trajectories (synth.splits.{split} writes none)"
            )
        return self

    @model_validator(mode="after")
    def _eval_within_synth(self) -> Params:
        """Every eval cell reads a split synth writes, and no more tasks than it holds
        (checked when the params write an eval section; the eval stage checks the data)."""
        if "eval" not in self.model_fields_set:
            return self
        for variant, split, tasks in self.eval.cells():
            key = f"eval.variants.{variant.name}"
            if split not in self.synth.splits:
                raise ValueError(f"{key}.splits: {split!r} is not among synth.splits")
            if tasks > self.synth.splits[split].n:
                raise ValueError(
                    f"{f'{key}.tasks' if variant.tasks else 'eval.tasks'}: {tasks} tasks of "
                    f"{split} (variant {variant.name!r}), but synth.splits.{split}.n is "
                    f"{self.synth.splits[split].n}"
                )
        return self


def load_params(path: str | Path = DEFAULT_PARAMS) -> Params:
    """Read and validate ``params.yaml``; raise :class:`ConfigError` naming file and key."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: file not found")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML: {err}") from err
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{path}: <root>: expected a mapping of sections, got {type(raw).__name__}"
        )
    try:
        # JSON mode keeps strict types (no "3" -> 3) but accepts YAML lists for ranges.
        params = Params.model_validate_json(json.dumps(raw, default=str))
    except ValidationError as err:
        first = err.errors()[0]
        value = first.get("input")
        shown = (
            ""
            if first["type"] == "missing" or not first["loc"]
            else f" (got {json.dumps(value, default=str)[:80]})"
        )
        extra = f"; {err.error_count() - 1} more error(s)" if err.error_count() > 1 else ""
        where = f"{dotted(first['loc'])}: " if first["loc"] else ""  # cross-section rules
        raise ConfigError(f"{path}: {where}{first['msg']}{shown}{extra}") from err
    params._file = str(path)
    return params
