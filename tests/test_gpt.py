"""course_utils.gpt: shapes, the causal mask, deterministic initialisation, clear errors; the corpus."""
import math

import pytest
import torch

from course_utils import data
from course_utils.gpt import GPT, GPTConfig

SMALL = GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=4, d_model=16)


def test_shapes_and_loss_at_initialisation_is_about_log_vocab():
    model = GPT(SMALL)
    idx = torch.randint(0, 11, (3, 10), generator=torch.Generator().manual_seed(0))
    assert model(idx).shape == (3, 10, 11)
    logits, loss = model(idx, idx)
    assert logits.shape == (3, 10, 11) and loss.shape == ()
    assert abs(loss.item() - math.log(11)) < 0.05   # small initial weights: nearly uniform predictions


def test_a_future_token_never_changes_a_past_logit():
    model = GPT(SMALL)
    idx = torch.randint(0, 11, (2, 12), generator=torch.Generator().manual_seed(1))
    changed = idx.clone()
    changed[:, 7:] = (changed[:, 7:] + 3) % 11   # change positions 7 and later
    before, after = model(idx), model(changed)
    torch.testing.assert_close(before[:, :7], after[:, :7], rtol=0, atol=0)
    assert not torch.allclose(before[:, 7:], after[:, 7:])


def test_initialisation_depends_only_on_the_seed_and_leaves_the_global_rng_alone():
    state = torch.random.get_rng_state()
    a, b, c = GPT(SMALL, seed=3), GPT(SMALL, seed=3), GPT(SMALL, seed=4)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.head.weight, c.head.weight)
    assert a.blocks[0].attn.proj.weight.std() < a.blocks[0].attn.q.weight.std()   # residual projections scaled
    assert all(torch.equal(p, torch.zeros_like(p)) for n, p in a.named_parameters() if n.endswith("bias"))


def test_parameter_count_follows_the_formula():
    c = SMALL
    d = c.d_model   # q, k, v, proj: 4 (d² + d); fc, proj: 8 d² + 5 d; two LayerNorms: 4 d
    per_block = 12 * d**2 + 13 * d
    expected = c.vocab_size * c.d_model + c.block_size * c.d_model + c.n_layer * per_block + 2 * c.d_model \
        + c.d_model * c.vocab_size
    assert sum(p.numel() for p in GPT(c).parameters()) == expected


def test_bad_configurations_and_inputs_say_what_is_wrong():
    with pytest.raises(ValueError, match="multiple of n_head"):
        GPTConfig(d_model=30, n_head=4)
    with pytest.raises(ValueError, match="n_layer must be a positive integer"):
        GPTConfig(n_layer=0)
    with pytest.raises(ValueError, match="longer than block_size=16"):
        GPT(SMALL)(torch.zeros(1, 17, dtype=torch.long))


def test_the_corpus_ships_with_python_and_windows_are_next_token_targets():
    text = data.zen_of_python()
    assert text.startswith("The Zen of Python, by Tim Peters") and len(text) == 856
    ids, vocab = data.char_tokens(text)
    assert "".join(vocab[i] for i in ids) == text and ids.dtype.name == "int64"
    x, y = data.token_windows(ids, batch=4, block=8, seed=0)
    assert x.shape == y.shape == (4, 8) and (x[:, 1:] == y[:, :-1]).all()
    assert (x == data.token_windows(ids, 4, 8, seed=0)[0]).all()
    with pytest.raises(ValueError, match="block must be between"):
        data.token_windows(ids, 1, len(ids))


def test_explicit_positions_and_a_swapped_attention_change_nothing_when_they_are_the_defaults():
    model = GPT(SMALL, seed=2)
    idx = torch.randint(0, 11, (2, 12), generator=torch.Generator().manual_seed(5))
    expected = model(idx)
    assert torch.equal(model(idx, positions=torch.arange(12)), expected)
    seen = []

    def spy(q, k, v):
        seen.append(q.shape)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    for block in model.blocks:
        block.attn.attend = spy
    assert torch.equal(model(idx), expected) and seen == [(2, 4, 12, 4)] * SMALL.n_layer
    with pytest.raises(ValueError, match="positions must have shape"):
        model(idx, positions=torch.arange(11))
    with pytest.raises(ValueError, match="below block_size=16"):
        model(idx, positions=torch.arange(12) + 8)
