from __future__ import annotations

import pytest
import torch

from textcrafter_rag.textcrafter.policy import PolicyConfig, TextCrafterPolicy


def test_default_heads_follow_the_paper() -> None:
    assert PolicyConfig(dim=384).resolved_heads == 6
    assert PolicyConfig(dim=768).resolved_heads == 12
    with pytest.raises(ValueError):
        PolicyConfig(dim=384, heads=5)


@pytest.mark.parametrize("training", [False, True])
def test_attention_on_one_token_equals_value_and_output_projection(training: bool) -> None:
    torch.manual_seed(0)
    policy = TextCrafterPolicy(PolicyConfig(dim=48, heads=4, dropout=0.0))
    policy.train(training)
    branch = policy.mean_branch
    h = torch.randn(7, 48)
    full = branch.attend(h, full_attention=True)
    fast = branch.attend(h)
    torch.testing.assert_close(full, fast, rtol=1e-5, atol=1e-6)
    # Changing Q and K weights changes nothing: the softmax over one key is identically 1.
    with torch.no_grad():
        branch.attention.in_proj_weight[:96].normal_()
    torch.testing.assert_close(branch.attend(h, full_attention=True), fast, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(policy.eval()(h).mu, policy(h, full_attention=True).mu, rtol=1e-5, atol=1e-6)


def test_branches_are_identical_in_structure_and_independent() -> None:
    policy = TextCrafterPolicy(PolicyConfig(dim=32, heads=4))
    a = {k: v.shape for k, v in policy.mean_branch.state_dict().items()}
    b = {k: v.shape for k, v in policy.direction_branch.state_dict().items()}
    assert a == b
    assert policy.mean_branch.head.weight.data_ptr() != policy.direction_branch.head.weight.data_ptr()


def test_outputs_unit_direction_and_capped_mean() -> None:
    policy = TextCrafterPolicy(PolicyConfig(dim=32, heads=4, max_snr=0.5)).eval()
    with torch.no_grad():
        policy.mean_branch.head.weight.mul_(1e4)  # try to make the action deterministic
        out = policy(torch.randn(10, 32))
    torch.testing.assert_close(out.v.norm(dim=-1), torch.ones(10))
    cap = 0.5 * out.sigma[0].pow(2).sum().sqrt()
    assert (out.mu.norm(dim=-1) <= cap * (1 + 1e-5)).all()


def test_log_prob_matches_torch_distribution() -> None:
    policy = TextCrafterPolicy(PolicyConfig(dim=16, heads=2)).eval()
    with torch.no_grad():
        out = policy(torch.randn(5, 16))
    delta = torch.randn(5, 16)
    expected = torch.distributions.Normal(out.mu, out.sigma).log_prob(delta).sum(-1)
    torch.testing.assert_close(TextCrafterPolicy.log_prob(delta, out), expected)
