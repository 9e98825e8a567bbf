"""The harness section: how a model acts in an episode (engine, turns, context strategy)."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field

from agentrl.config.base import Strict

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
