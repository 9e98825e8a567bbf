"""The synth section: how much MidTool-style data of which depth goes into each split."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from agentrl.config.base import SPLITS, TRACE_SPLITS, Strict, import_plugin

IntRange = Annotated[tuple[int, int], Field(description="Inclusive [low, high] range.")]


class Difficulty(Strict):
    """Difficulty knobs; each is an inclusive range a task draws from.

    hops: knowledge-base relations chained (multi-hop QA, HotpotQA-style).
    ops: arithmetic operations chained (calculator, compose).
    horizon: state-changing operations (store) or conversions (convert).
    num_tools: tools offered in the schema, distractors from other families included
    (ToolACE: more tools offered make selection harder).
    """

    hops: IntRange = (1, 1)
    ops: IntRange = (1, 1)
    horizon: IntRange = (1, 2)
    num_tools: IntRange = (2, 3)

    @model_validator(mode="after")
    def _ordered(self) -> Difficulty:
        for name in ("hops", "ops", "horizon", "num_tools"):
            low, high = getattr(self, name)
            if low < 1 or high < low:
                raise ValueError(
                    f"{name} must be [low, high] with 1 <= low <= high, got {[low, high]}"
                )
        return self


class SplitSection(Strict):
    """One split of the synthesised data."""

    n: int = Field(ge=0, description="Accepted samples to write.")
    families: list[str] | None = Field(
        None, description="Families drawn from (uniformly); None means every registered family."
    )
    difficulty: Difficulty = Field(Difficulty(), description="Ranges tasks draw their depth from.")
    rename_prob: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="Probability a tool gets a random surface (name, argument names, "
        "description, order) instead of its canonical one; 1.0 forces schema reading.",
    )
    recovery_prob: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Share of trajectories with a wrong call, its real error and the fix.",
    )
    summary_prob: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Share of samples with two or more calls that practise a context restart "
        "(harness.context summary/adaptive): trained as two contexts, the history up to a "
        "random call with the harness's summary request and a progress summary quoting every "
        "result, then the task plus that summary followed by the rest of the episode.",
    )
    copy_items: int = Field(
        0,
        ge=0,
        description="Extra 'Repeat exactly: ...' items (training splits): span copying, the skill a "
        "tiny model lacks (none had appeared by 3 M training tokens of a from-scratch model); "
        "short, so packing also fills row gaps with them.",
    )
    min_tokens: int = Field(
        0, ge=0, description="Reject trajectories shorter than this many estimated tokens."
    )
    curriculum: bool = Field(False, description="Order samples easy to hard by depth.")
    thoughts: Literal["brief", "plan", "restate"] = Field(
        "brief",
        description="The expert's text before each call: 'brief' says the step it takes; "
        "'plan' adds the steps still left after it ('Left after this: the population of "
        "that; add 5.' or 'This is the last step.'), so where a chain stops is written in "
        "the trace. Measured on SmolLM2-135M with sft at hops/ops [1, 2]: it ends repeated "
        "operations, but its calculator and knowledge-base plans list no more steps than "
        "their traces did, so deeper chains still stop early. 'restate' writes instead the "
        "task left from this call on in the prompt's words, what is found filled in ('Left: "
        "the population of Ulm, then add 5.'): the next call reads off its end, the next "
        "restatement copies it less one step (calculator, knowledge_base and compose; 'brief' "
        "in the other families). Measured the same way: the first restatement names every "
        "step more often, but later ones keep at most the one step left that the traces "
        "showed (heldout_compose 0.045 -> 0.005), and rl on top learns to stop dropping "
        "steps, repeating a done one (test 0.955 -> 0.685). Written by the oracle teacher (an openai "
        "teacher of midtrain or sft traces writes its own).",
    )


class TeacherSection(Strict):
    """Who writes the trajectories that real tool execution then checks."""

    kind: Literal["oracle", "openai"] = Field(
        "oracle", description="oracle: plans from ground truth; openai: any chat endpoint."
    )
    base_url: str | None = Field(None, description="openai: the endpoint, e.g. http://host/v1.")
    model: str | None = Field(None, description="openai: the model name the endpoint serves.")
    api_key_env: str = Field(
        "OPENAI_API_KEY", description="openai: environment variable holding the API key."
    )
    temperature: float = Field(0.7, ge=0.0, description="openai: sampling temperature.")
    max_turns: int = Field(12, ge=1, description="openai: turns before a trajectory is dropped.")
    timeout_s: float = Field(60.0, gt=0, description="openai: timeout of one request.")

    @model_validator(mode="after")
    def _endpoint(self) -> TeacherSection:
        if self.kind == "openai" and (not self.base_url or not self.model):
            raise ValueError("teacher kind 'openai' needs base_url and model")
        return self


class SynthSection(Strict):
    """The synth stage: MidTool-style tool-use data, verified, in held-out splits."""

    workers: int = Field(2, ge=1, description="Worker processes; outputs do not depend on it.")
    shard_size: int = Field(5000, ge=1, description="Samples per JSONL shard.")
    heldout_tool_share: float = Field(
        0.25,
        gt=0.0,
        lt=1.0,
        description="Share of each name vocabulary reserved for heldout_tools.",
    )
    max_attempts_factor: int = Field(
        4, ge=1, description="Give up on a split after n * factor draws (bad knobs, not luck)."
    )
    envs: list[str] = Field(
        default_factory=list, description="Plugin environments as 'module:Class' dotted paths."
    )
    teacher: TeacherSection = TeacherSection()
    splits: dict[str, SplitSection] = Field(
        description="Split name -> its size and settings; names from midtrain, sft, rl "
        "(training) and test, heldout_tools, heldout_compose, long_horizon (eval)."
    )

    @field_validator("envs")
    @classmethod
    def _importable(cls, envs: list[str]) -> list[str]:
        # checked when params load, so every entry point refuses a bad plugin the same way
        for path in envs:
            import_plugin(path)
        return envs

    @model_validator(mode="after")
    def _known_splits(self) -> SynthSection:
        unknown = sorted(set(self.splits) - set(SPLITS))
        if unknown:
            raise ValueError(f"unknown split(s) {unknown}; expected a subset of {list(SPLITS)}")
        if self.teacher.kind != "oracle":  # its traces' wording is the teacher model's own
            planned = [
                s for s in TRACE_SPLITS if s in self.splits and self.splits[s].thoughts != "brief"
            ]
            if planned:
                raise ValueError(
                    f"splits.{planned[0]}.thoughts: {self.splits[planned[0]].thoughts!r} is written "
                    f"by the oracle teacher; teacher.kind is {self.teacher.kind!r}"
                )
        return self
