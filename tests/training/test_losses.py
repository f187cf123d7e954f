"""Policy losses and aggregations: values, gradients, clipping, and micro-batch additivity."""

import pytest
import torch

from parathink.training.losses import NORMALISERS, LossSpec, get_aggregation, get_policy_loss, grpo_loss, k3_kl


def test_clipped_surrogate_values_and_clip_mask():
    logp = torch.log(torch.tensor([[1.5, 1.0, 0.5]]))  # ratios 1.5, 1.0, 0.5 against old logp 0
    old = torch.zeros(1, 3)
    pos, clipped_pos = get_policy_loss("clipped")(logp, old, torch.tensor([1.0]), 0.2, 0.28)
    assert torch.allclose(pos, -torch.tensor([[1.28, 1.0, 0.5]]))
    assert clipped_pos.tolist() == [[True, False, False]]  # positive advantage: only the upper side clips
    neg, clipped_neg = get_policy_loss("clipped")(logp, old, torch.tensor([-1.0]), 0.2, 0.28)
    assert torch.allclose(neg, torch.tensor([[1.5, 1.0, 0.8]]))
    assert clipped_neg.tolist() == [[False, False, True]]


def test_clipped_tokens_get_no_gradient_and_on_policy_keeps_all():
    logp = torch.log(torch.tensor([[1.5, 1.0]])).requires_grad_()
    loss, _ = get_policy_loss("clipped")(logp, torch.zeros(1, 2), torch.tensor([1.0]), 0.2, 0.2)
    loss.sum().backward()
    assert logp.grad[0, 0] == 0 and logp.grad[0, 1] != 0

    logp2 = torch.tensor([[0.3, -2.0]], requires_grad=True)
    loss2, clipped = get_policy_loss("on_policy")(logp2, torch.zeros(1, 2), torch.tensor([2.0]), 0.2, 0.2)
    assert torch.allclose(loss2, torch.full((1, 2), -2.0))  # ratio is exactly 1 in value
    loss2.sum().backward()
    assert torch.allclose(logp2.grad, torch.full((1, 2), -2.0))  # gradient of -A log pi on every token
    assert not clipped.any()


def test_aggregations_weigh_tokens_or_responses():
    per_token = torch.tensor([[1.0, 1.0, 1.0, 1.0], [3.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    tok = get_aggregation("token_mean")(per_token, mask, NORMALISERS["token_mean"](mask))
    seq = get_aggregation("seq_mean")(per_token, mask, NORMALISERS["seq_mean"](mask))
    assert tok.item() == pytest.approx(7 / 5)
    assert seq.item() == pytest.approx((1 + 3) / 2)


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean"])
@pytest.mark.parametrize("policy", ["clipped", "on_policy"])
def test_micro_batches_sum_to_the_whole_batch(agg, policy):
    g = torch.Generator().manual_seed(0)
    logp = (-torch.rand(6, 5, generator=g)).requires_grad_()
    old = logp.detach() + 0.1 * torch.randn(6, 5, generator=g)
    ref = logp.detach() - 0.05
    adv = torch.randn(6, generator=g)
    mask = (torch.rand(6, 5, generator=g) > 0.3).float()
    mask[:, 0] = 1
    spec = LossSpec(policy_loss=policy, loss_agg=agg, eps_low=0.1, eps_high=0.3, kl_coef=0.05)
    norm = NORMALISERS[agg](mask)
    whole, _ = grpo_loss(spec, logp, old, adv, mask, norm, ref)
    parts = sum(grpo_loss(spec, logp[i:i + 2], old[i:i + 2], adv[i:i + 2], mask[i:i + 2], norm, ref[i:i + 2])[0]
                for i in range(0, 6, 2))
    assert torch.allclose(whole, parts, atol=1e-6)


def test_k3_kl_is_nonnegative_and_zero_at_equality():
    p = torch.randn(100)
    assert torch.all(k3_kl(p, p + torch.randn(100)) >= 0)
    assert torch.allclose(k3_kl(p, p), torch.zeros(100))


def test_kl_term_moves_the_loss_and_stats_count_tokens():
    logp = torch.zeros(1, 3, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    spec = LossSpec(kl_coef=0.5)
    base, stats = grpo_loss(LossSpec(), logp, logp.detach(), torch.tensor([0.0]), mask, 2.0, torch.full((1, 3), -1.0))
    with_kl, _ = grpo_loss(spec, logp, logp.detach(), torch.tensor([0.0]), mask, 2.0, torch.full((1, 3), -1.0))
    assert base.item() == 0.0
    assert with_kl.item() == pytest.approx(0.5 * (torch.exp(torch.tensor(-1.0)).item()))
    assert stats["tokens"].item() == 2 and stats["kl"].item() > 0


def test_unknown_names_are_clear():
    with pytest.raises(KeyError, match="unknown policy loss 'ppo2'"):
        get_policy_loss("ppo2")
    with pytest.raises(KeyError, match="unknown loss aggregation 'mean'"):
        get_aggregation("mean")
