"""Advantage estimators and the policy loss against hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.rl.advantages import Rollout, advantages
from agentrl.rl.loss import LossConfig, aggregate, kl, policy_loss


def group(*rewards: float, turns: int = 1) -> list[Rollout]:
    return [Rollout(r, tuple(f"s{i}-{t}" for t in range(turns))) for i, r in enumerate(rewards)]


def flat(per_turn) -> list[float]:
    return [round(a, 4) for g in per_turn for r in g for a in r]


def test_grpo_dr_grpo_rloo_by_hand() -> None:
    groups = [group(1.0, 0.0, 0.0, 1.0)]  # mean 0.5, sample std 0.57735
    assert flat(advantages("grpo", groups)) == [0.866, -0.866, -0.866, 0.866]
    assert flat(advantages("dr_grpo", groups)) == [0.5, -0.5, -0.5, 0.5]
    # rloo: 1 - mean(0, 0, 1) = 0.6667; 0 - mean(1, 0, 1) = -0.6667
    assert flat(advantages("rloo", groups)) == [0.6667, -0.6667, -0.6667, 0.6667]


def test_rft_weights_the_successes_of_any_group_and_nothing_else() -> None:
    groups = [group(1.0, 0.0, 1.0), group(1.0, 1.0), group(0.0, -0.5)]
    assert flat(advantages("rft", groups)) == [1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]


def test_equal_rewards_and_singletons_get_zero() -> None:
    for name in ("grpo", "dr_grpo", "rloo", "reinforce_pp_baseline", "gigpo"):
        assert flat(advantages(name, [group(1.0, 1.0, 1.0), group(0.3)])) == [0.0] * 4


def test_reinforce_pp_whitens_over_the_batch() -> None:
    # centred: [0.5, -0.5] and [1.5, -1.5]; batch mean 0, population std sqrt(1.25)
    out = flat(advantages("reinforce_pp_baseline", [group(1.0, 0.0), group(3.0, 0.0)]))
    s = math.sqrt(1.25)
    assert out == [round(x / s, 4) for x in (0.5, -0.5, 1.5, -1.5)]


def test_every_turn_carries_the_episode_advantage() -> None:
    out = advantages("grpo", [group(1.0, 0.0, turns=3)])
    assert out[0][0] == [pytest.approx(0.7071, abs=1e-4)] * 3
    assert out[0][1] == [pytest.approx(-0.7071, abs=1e-4)] * 3


def test_gigpo_equals_grpo_without_repeated_states() -> None:
    groups = [group(1.0, 0.0, 1.0, turns=3), group(0.0, 1.0, turns=2)]
    assert flat(advantages("gigpo", groups)) == flat(advantages("grpo", groups))


def test_gigpo_step_advantage_in_anchor_groups_by_hand() -> None:
    # two rollouts share the start state "a"; both reach "b" at turn 1, where one then
    # succeeds in one more turn and the other fails; a third rollout leaves at turn 1.
    rollouts = [
        Rollout(1.0, ("a", "b", "c1")),
        Rollout(0.0, ("a", "b", "c2")),
        Rollout(0.0, ("a", "x")),
    ]
    gamma = 0.5
    out = advantages("gigpo", [rollouts], gamma=gamma, omega=1.0)
    mean, sd = 1 / 3, math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)
    episode = [(r - mean) / sd for r in (1.0, 0.0, 0.0)]
    # anchor "a": returns 1*0.25, 0*0.25, 0*0.5 -> normalised (0.25, 0, 0)
    a_returns = [0.25, 0.0, 0.0]
    a_mean, a_sd = sum(a_returns) / 3, sample_sd(a_returns)
    a_step = [(v - a_mean) / a_sd for v in a_returns]
    # anchor "b": returns 0.5 and 0 -> +0.7071, -0.7071; singletons c1, c2, x: 0
    expected = [
        [episode[0] + a_step[0], episode[0] + 0.70711, episode[0]],
        [episode[1] + a_step[1], episode[1] - 0.70711, episode[1]],
        [episode[2] + a_step[2], episode[2]],
    ]
    for got, want in zip(out[0], expected, strict=True):
        assert got == pytest.approx(want, abs=1e-4)


def sample_sd(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def test_unknown_estimator_is_named() -> None:
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'"):
        advantages("ppo", [group(1.0)])


def test_aggregations_by_hand() -> None:
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert float(aggregate(values, mask, "token_mean")) == pytest.approx(2.5)
    assert float(aggregate(values, mask, "seq_mean_token_mean")) == pytest.approx(3.0)
    assert float(aggregate(values, mask, "seq_mean_token_sum_norm")) == pytest.approx(10 / 6)


def test_on_policy_gradient_is_minus_the_advantage_and_masked_tokens_get_none() -> None:
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    adv = torch.tensor([[2.0, -1.0, 5.0]])
    mask = torch.tensor([[1, 1, 0]])  # the last token was inserted by the harness
    loss, figures = policy_loss(logp, logp.detach(), logp.detach(), adv, mask, LossConfig())
    loss.backward()
    assert float(loss.detach()) == pytest.approx(-(2.0 - 1.0) / 2)
    assert logp.grad.tolist() == [[-1.0, 0.5, 0.0]]
    assert figures["clip_frac_low"] == figures["clip_frac_high"] == 0.0


def test_clip_low_and_high_stop_the_gradient() -> None:
    old = torch.zeros(1, 2)
    logp = torch.tensor([[0.5, -0.5]], requires_grad=True)  # ratios 1.65 and 0.61
    adv = torch.tensor([[1.0, -1.0]])
    cfg = LossConfig(clip_low=0.2, clip_high=0.28, mismatch="none")
    loss, figures = policy_loss(logp, old, old, adv, torch.ones(1, 2), cfg)
    loss.backward()
    assert float(loss.detach()) == pytest.approx((-1.28 + 0.8) / 2)
    assert logp.grad.tolist() == [[0.0, 0.0]]
    assert figures["clip_frac_high"] == figures["clip_frac_low"] == 0.5


def test_mismatch_correction_weights_or_masks_tokens() -> None:
    logp = torch.zeros(1, 2)
    rollout = torch.tensor([[-math.log(3.0), 0.0]])  # the engine was 3x less likely on token 0
    adv = torch.ones(1, 2)
    tis, figures = policy_loss(
        logp, logp, rollout, adv, torch.ones(1, 2), LossConfig(mismatch_cap=2.0)
    )
    assert float(tis) == pytest.approx(-(2.0 + 1.0) / 2)  # weight 3 truncated to 2
    assert figures["is_weight_max"] == pytest.approx(3.0)
    masked, _ = policy_loss(
        logp, logp, rollout, adv, torch.ones(1, 2), LossConfig(mismatch="mask", mismatch_cap=2.0)
    )
    assert float(masked) == pytest.approx(-1.0)  # only token 1 is left


def test_kl_estimators_by_hand() -> None:
    logp, ref = torch.tensor([[-1.0]]), torch.tensor([[-2.0]])
    assert float(kl(logp, ref, "k1")) == pytest.approx(1.0)
    assert float(kl(logp, ref, "k3")) == pytest.approx(math.exp(-1) + 1 - 1)
    assert float(kl(logp, logp, "k3")) == 0.0
    cfg = LossConfig(kl_coef=0.5, kl_estimator="k1", mismatch="none")
    loss, figures = policy_loss(logp, logp, logp, torch.zeros(1, 1), torch.ones(1, 1), cfg, ref)
    assert float(loss) == pytest.approx(0.5) and figures["kl"] == pytest.approx(1.0)


def test_each_turn_run_takes_its_advantage_across_restart_segments() -> None:
    from agentrl.harness.records import Episode, Segment, TurnStats
    from agentrl.rl.batch import to_sequences

    first = Segment([1, 2, 3, 4, 5, 6], [0, 1, 1, 0, 1, 0], [0, -0.1, -0.2, 0, -0.3, 0], 1)
    restarted = Segment([7, 8, 9], [0, 0, 1], [0, 0, -0.4], 2)
    episode = Episode("t", 0, [], [], [first, restarted], [TurnStats(1, 0, {}, 0, False)] * 3)
    seq_a, seq_b = to_sequences([episode], [[0.5, -1.0, 2.0]])
    assert seq_a.advantages == [0, 0.5, 0.5, 0, -1.0, 0] and seq_b.advantages == [0, 0, 2.0]
    assert seq_a.rollout_logp == first.logprobs and seq_b.mask == [0, 0, 1]
    episode.turns.append(TurnStats(1, 0, {}, 0, False))
    with pytest.raises(ValueError, match="3 sampled runs for 4 turns"):
        to_sequences([episode], [[0.0] * 4])


def test_rewards_grounded_only_penalty_and_the_random_control() -> None:
    import random

    from agentrl.config import RLSection
    from agentrl.harness.records import Episode, TurnStats
    from agentrl.rl.rewards import outcome_rewards

    def episode(reward: float, grounded: bool, errors: int) -> Episode:
        turn = TurnStats(1, 1, {"tool_error": errors} if errors else {}, 0, False)
        return Episode(
            "t", 0, [], [], turns=[turn], reward=reward, success=bool(reward), grounded=grounded
        )

    batch = [episode(1.0, True, 0), episode(1.0, False, 0), episode(0.0, False, 2)]
    assert outcome_rewards(batch, RLSection(), random.Random(0)) == [1.0, 0.0, 0.0]
    shaped = RLSection(grounded_only=False, invalid_call_penalty=0.1)
    assert outcome_rewards(batch, shaped, random.Random(0)) == [1.0, 1.0, pytest.approx(-0.2)]
    control = RLSection(reward="random")
    many = batch * 2000  # grounded mean 1/3
    drawn = outcome_rewards(many, control, random.Random(1))
    assert set(drawn) == {0.0, 1.0} and abs(sum(drawn) / len(drawn) - 1 / 3) < 0.02
    # independent of the outcome: as often 1 where the episode succeeded as where it failed
    on_success = [d for d, e in zip(drawn, many, strict=True) if e.grounded]
    on_failure = [d for d, e in zip(drawn, many, strict=True) if not e.grounded]
    assert abs(sum(on_success) / len(on_success) - sum(on_failure) / len(on_failure)) < 0.05


def test_progress_credits_a_failed_episode_for_the_expert_results_it_obtained() -> None:
    import random

    from agentrl.config import RLSection
    from agentrl.harness.records import Episode
    from agentrl.rl.rewards import outcome_rewards

    def tool(content: str) -> dict[str, str]:
        return {"role": "tool", "content": content}

    task = {  # an rl record: the prompt, and the expert's trajectory apart
        "id": "t",
        "messages": [{"role": "user", "content": "the mayor of the birthplace of Venranba"}],
        "expert": [{"role": "user", "content": "q"}, tool("Ulm"), tool("Odila")],
    }

    def episode(observations: list[str], grounded: bool) -> Episode:
        return Episode(
            "t", 0, [tool(o) for o in observations], [], reward=float(grounded),
            success=grounded, grounded=grounded,
        )  # fmt: skip

    batch = [
        episode(["Ulm", "Odila"], True),  # the chain and the answer
        episode(["Ulm", "Odila"], False),  # the whole chain, a wrong answer
        episode(["Error: no relation 'mayor'", "Ulm"], False),  # the first hop
        episode(["Error: no relation 'mayor'"], False),  # nothing
    ]
    credited = RLSection(progress_weight=0.25)
    assert outcome_rewards(batch, credited, random.Random(0), [task]) == [1.0, 0.25, 0.125, 0.0]
    # off by default and without the tasks (one-turn episodes): the outcome alone
    assert outcome_rewards(batch, RLSection(), random.Random(0), [task]) == [1.0, 0.0, 0.0, 0.0]
    assert outcome_rewards(batch, credited, random.Random(0)) == [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="progress is measured over whole episodes"):
        RLSection(progress_weight=0.25, rollouts="pivots")


def test_a_scale_overrides_the_estimators_own() -> None:
    groups = [group(1.0, 0.0), group(3.0, 0.0)]
    assert flat(advantages("grpo", groups, scale="none")) == flat(advantages("dr_grpo", groups))
    batch = flat(advantages("grpo", groups, scale="batch"))
    assert batch == flat(advantages("reinforce_pp_baseline", groups))
    with pytest.raises(ValueError, match="unknown advantage scale 'step'"):
        advantages("grpo", groups, scale="step")
