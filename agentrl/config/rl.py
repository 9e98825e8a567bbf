"""The rl and pivots sections, and the rules that tie rl to its engine and ranks."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agentrl.config.base import TRAIN_SPLITS, Strict
from agentrl.config.harness import HarnessSection
from agentrl.config.training import LoraSection


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
    progress_weight: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Partial credit for a failed episode: this weight times the share of "
        "the expert trajectory's tool results it also obtained (the chain's intermediate "
        "facts, each verified by a tool; a subgoal reward). Tasks deeper than sft can finish "
        "come out all wrong in a group, no advantage; partial credit ranks how far along the "
        "chain each got. Below 1, finishing always beats walking the chain and answering "
        "wrong. Whole episodes only (pivot turns keep their verdict); 0 = outcome only.",
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

    @model_validator(mode="after")
    def _progress_needs_episodes(self) -> RLSection:
        if self.progress_weight and self.rollouts == "pivots":
            raise ValueError(
                f"progress_weight {self.progress_weight} with rollouts pivots: progress is "
                "measured over whole episodes, and pivots has none; use episodes or mix"
            )
        return self


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
