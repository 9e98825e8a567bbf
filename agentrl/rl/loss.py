"""The policy loss: token-level PPO clip with train-inference mismatch correction and an
optional KL to a frozen reference, over the records' loss mask (tool responses and every
harness-inserted token have mask 0 and never get gradient).

- PPO clip (Schulman et al. 2017) with separate ε_low / ε_high (DAPO's clip-higher,
  Yu et al. 2025): -min(r·A, clip(r, 1-ε_low, 1+ε_high)·A), r = π_θ / π_old.
- Mismatch correction (Yao et al. 2025, "Your efficient RL framework secretly brings you
  off-policy RL training"): the rollout engine's log-probs differ from the trainer's;
  ``tis`` weights each token by min(π_old / π_rollout, cap) (truncated importance
  sampling, no gradient); ``mask`` drops tokens whose ratio leaves [1/cap, cap].
- KL to the reference: ``k1`` = log π_θ - log π_ref; ``k3`` = exp(ref - θ) - (ref - θ) - 1
  (Schulman's unbiased, always-positive estimator, as GRPO uses).
- Aggregation: ``token_mean`` (every token counts the same; DAPO), ``seq_mean_token_mean``
  (each sequence counts the same; GRPO), ``seq_mean_token_sum_norm`` (sum over a
  sequence's tokens divided by a constant, the longest sequence; Dr.GRPO).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LossConfig:
    clip_low: float = 0.2
    clip_high: float = 0.28
    aggregation: str = "token_mean"
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    mismatch: str = "tis"  # tis | mask | none
    mismatch_cap: float = 2.0


def aggregate(values: torch.Tensor, mask: torch.Tensor, how: str) -> torch.Tensor:
    """Reduce per-token ``values`` (batch, tokens) over ``mask`` as ``how`` says."""
    mask = mask.to(values.dtype)
    per_sequence = mask.sum(-1)
    if how == "token_mean":
        return (values * mask).sum() / mask.sum().clamp(min=1)
    if how == "seq_mean_token_mean":
        live = per_sequence > 0
        means = (values * mask).sum(-1)[live] / per_sequence[live]
        return means.mean() if live.any() else values.sum() * 0
    if how == "seq_mean_token_sum_norm":
        return (values * mask).sum(-1).sum() / (values.shape[0] * mask.shape[-1])
    raise ValueError(f"unknown loss aggregation '{how}'")


def kl(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    if estimator == "k1":
        return logp - ref_logp
    if estimator == "k3":
        delta = ref_logp - logp
        return torch.exp(delta) - delta - 1
    raise ValueError(f"unknown KL estimator '{estimator}'")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: LossConfig,
    ref_logp: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss to minimise and its figures; every tensor is (batch, tokens)."""
    mask = mask.to(logp.dtype)
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1 - cfg.clip_low, 1 + cfg.clip_high) * advantages
    per_token = -torch.minimum(unclipped, clipped)
    behaviour = torch.exp(old_logp - rollout_logp).detach()  # π_old / π_rollout
    if cfg.mismatch == "tis":
        per_token = per_token * behaviour.clamp(max=cfg.mismatch_cap)
    elif cfg.mismatch == "mask":
        inside = (behaviour <= cfg.mismatch_cap) & (behaviour >= 1 / cfg.mismatch_cap)
        mask = mask * inside.to(mask.dtype)
    elif cfg.mismatch != "none":
        raise ValueError(f"unknown mismatch correction '{cfg.mismatch}'")
    loss = aggregate(per_token, mask, cfg.aggregation)
    figures: dict[str, float] = {}
    if ref_logp is not None and cfg.kl_coef > 0:
        divergence = aggregate(kl(logp, ref_logp, cfg.kl_estimator), mask, cfg.aggregation)
        loss = loss + cfg.kl_coef * divergence
        figures["kl"] = float(divergence.detach())
    tokens = mask.sum().clamp(min=1)
    with torch.no_grad():
        low = ((ratio < 1 - cfg.clip_low) & (advantages < 0)).to(mask.dtype)
        high = ((ratio > 1 + cfg.clip_high) & (advantages > 0)).to(mask.dtype)
        figures |= {
            "policy_loss": float(loss.detach()),
            "clip_frac_low": float((low * mask).sum() / tokens),
            "clip_frac_high": float((high * mask).sum() / tokens),
            "is_weight_mean": float((behaviour * mask).sum() / tokens),
            "is_weight_max": float((behaviour * mask).max()),
            "rollout_train_logp_gap": float(
                ((old_logp - rollout_logp).abs() * mask).sum() / tokens
            ),
        }
    return loss, figures
