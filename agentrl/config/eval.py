"""The eval section (the checkpoints, splits and harness variants the eval stage runs)
and the BFCL section."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from agentrl.config.base import EVAL_SPLITS, Strict, dotted
from agentrl.config.harness import HarnessSection


class EvalVariant(Strict):
    """One harness setting the eval stage runs: overrides of `harness` on some splits."""

    name: str = Field(
        min_length=1, pattern=r"^[A-Za-z0-9_-]+$", description="Its key in metrics/eval.json."
    )
    harness: dict[str, Any] = Field(
        default_factory=dict,
        description="Fields of `harness` this variant changes, e.g. {context: summary} or "
        "{temperature: 0}; checked against HarnessSection.",
    )
    splits: list[Literal["test", "heldout_tools", "heldout_compose", "long_horizon"]] | None = (
        Field(None, description="Splits this variant runs on; None: every eval split.")
    )
    samples: int | None = Field(
        None, ge=1, description="Episodes per task; None: eval.samples. Greedy needs one."
    )
    tasks: int | None = Field(
        None,
        ge=1,
        description="Tasks per split for this variant (the first n); None: eval.tasks. At "
        "most the split's synth.splits.<split>.n.",
    )

    def applied_to(self, base: HarnessSection) -> HarnessSection:
        """The harness this variant runs: ``base`` with its overrides, validated."""
        return HarnessSection.model_validate_json(
            base.model_copy(update=self.harness).model_dump_json()
        )


class BFCLSection(Strict):
    """The external benchmark: Berkeley Function Calling Leaderboard, non-live AST categories."""

    package: str = Field(
        "bfcl-eval==2026.3.23",
        description="The PyPI release whose bundled data files are read (wheel fetched "
        "with `pip download --no-deps`; its code is never imported).",
    )
    sha256: str = Field(
        "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a",
        pattern=r"^[0-9a-f]{64}$",
        description="Digest the fetched wheel must have: the data cannot change under a pin.",
    )
    categories: list[Literal["simple", "multiple", "parallel"]] = Field(
        default_factory=lambda: ["simple", "multiple"],
        description="simple: one function, one call; multiple: pick one of 2-4 functions; "
        "parallel: several calls of one function in one turn (order-free).",
    )
    n: int = Field(
        100, ge=0, description="Questions per category, the first n in file order; 0: all."
    )
    max_new_tokens: int = Field(192, ge=1, description="Tokens the single answer turn may use.")


class EvalSection(Strict):
    """The eval stage: every checkpoint on every eval split and harness variant."""

    checkpoints: list[Literal["midtrain", "sft", "rl"]] = Field(
        default_factory=lambda: ["sft", "rl"],
        description="Model directories under base.paths.models to evaluate, in pipeline order.",
    )
    tasks: int = Field(
        200,
        ge=1,
        description="Tasks per split: the first n of its shards, the same for every "
        "checkpoint and sampling seed, so two checkpoints are compared task by task (a paired "
        "difference: at ~60% success and ~15% of tasks changing outcome, 200 tasks give "
        "an interval of about +-5.5 points, 64 about +-9.5).",
    )
    samples: int = Field(
        1,
        ge=1,
        description="Episodes per task: pass@1 is their mean, pass@k their best-of-k; the "
        "n-th episode of a task pairs with the n-th of another checkpoint.",
    )
    pass_k: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [1],
        description="k of the unbiased pass@k estimator (Chen et al. 2021); k <= samples "
        "(a variant with fewer samples reports the k it can).",
    )
    seed: int = Field(0, ge=0, description="Sampling seed, added to base.seed.")
    variants: list[EvalVariant] = Field(
        default_factory=lambda: [
            EvalVariant(
                name="greedy",
                harness={"temperature": 0.0, "max_turns": 10},
                splits=["test", "heldout_tools", "heldout_compose"],
            ),
            EvalVariant(name="sampled", splits=["test"], tasks=100),
            EvalVariant(
                name="summary",
                harness={
                    "context": "summary",
                    "summary_at": 0.85,
                    "max_turns": 24,
                    "temperature": 0.0,
                },
                splits=["long_horizon"],
            ),
        ],
        min_length=1,
        description="Harness settings to compare; the first is the headline. "
        "metrics/eval.json is always {checkpoint: {variant: {split: metrics}}}.",
    )
    trajectories: int = Field(
        4, ge=0, description="Episodes per checkpoint x split saved and sent as MLflow traces."
    )
    bfcl: BFCLSection = BFCLSection()

    def variant(self, name: str) -> EvalVariant:
        """The variant called ``name``."""
        return next(v for v in self.variants if v.name == name)

    def cells(self) -> list[tuple[EvalVariant, str, int]]:
        """(variant, split, tasks) of every cell a checkpoint runs, in report order."""
        return [
            (v, split, v.tasks or self.tasks)
            for v in self.variants
            for split in (v.splits or EVAL_SPLITS)
        ]

    @model_validator(mode="after")
    def _consistent(self) -> EvalSection:
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"variant names repeat: {names}")
        if max(self.pass_k) > self.samples:
            raise ValueError(f"pass_k {max(self.pass_k)} > samples {self.samples}")
        for v in self.variants:
            try:
                HarnessSection.model_validate_json(json.dumps(v.harness))
            except ValidationError as err:
                first = err.errors()[0]
                raise ValueError(
                    f"variant {v.name!r}: harness.{dotted(first['loc'])}: {first['msg']}"
                ) from None
        return self
