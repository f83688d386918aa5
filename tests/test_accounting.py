"""course_utils.accounting: every formula equals a count on the real GPT (parameters, FLOPs from
FlopCounterMode, bytes autograd saves for backward)."""
import pytest
import torch

from course_utils import accounting
from course_utils.gpt import GPT, GPTConfig

CONFIGS = [GPTConfig(vocab_size=50, block_size=32, n_layer=2, n_head=4, d_model=32),
           GPTConfig(vocab_size=17, block_size=16, n_layer=3, n_head=6, d_model=48)]


@pytest.mark.parametrize("c", CONFIGS)
def test_parameters_by_part_match_the_model(c):
    model = GPT(c)
    counted = accounting.gpt_params(c.vocab_size, c.block_size, c.n_layer, c.d_model)
    assert counted["total"] == sum(p.numel() for p in model.parameters())
    assert counted["blocks"] == sum(p.numel() for p in model.blocks.parameters())
    assert accounting.block_params(c.d_model, bias=False) == 12 * c.d_model**2 + 2 * c.d_model


@pytest.mark.parametrize("c", CONFIGS)
def test_training_flops_are_6N_plus_attention_as_flop_counter_mode_counts_them(c):
    model, b, s = GPT(c), 2, c.block_size
    idx = torch.randint(0, c.vocab_size, (b, s), generator=torch.Generator().manual_seed(0))

    def step():
        _, loss = model(idx, idx)
        loss.backward()

    forward = accounting.count_flops(lambda: model(idx))
    train = accounting.count_flops(step)
    per_token = accounting.train_flops_per_token(c.vocab_size, c.n_layer, c.d_model, s)
    assert train == per_token * b * s and forward * 3 == train


def test_the_fused_cpu_attention_kernel_is_invisible_to_flop_counter_mode():
    from torch.utils.flop_counter import FlopCounterMode

    c = CONFIGS[0]
    attn = GPT(c).blocks[0].attn
    x = torch.randn(2, c.block_size, c.d_model)
    with FlopCounterMode(display=False) as default:
        attn(x)
    linears = 4 * 2 * (2 * c.block_size) * c.d_model**2
    assert default.get_total_flops() == linears                       # attention's own matmuls: missing
    assert accounting.count_flops(lambda: attn(x)) == linears + 4 * 2 * c.block_size**2 * c.d_model


@pytest.mark.parametrize("dtype, element_bytes", [(torch.float32, 4), (torch.bfloat16, 2)])
@pytest.mark.parametrize("b, s, h, a", [(2, 32, 32, 4), (3, 16, 48, 6), (1, 64, 64, 8)])
def test_activation_bytes_of_a_block_equal_what_autograd_saves(dtype, element_bytes, b, s, h, a):
    block = GPT(GPTConfig(vocab_size=50, block_size=s, n_layer=1, n_head=a, d_model=h)).blocks[0].to(dtype)
    x = torch.randn(b, s, h, dtype=dtype, requires_grad=True)
    saved = accounting.saved_activation_bytes(lambda: block(x), block.parameters())
    assert saved == accounting.activation_bytes_block(s, b, h, a, element_bytes)


def test_megatron_formula_and_model_state_bytes():
    s, b, h, a = 2048, 1, 12288, 96
    assert accounting.activation_bytes_megatron(s, b, h, a) == s * b * h * (34 + 5 * a * s // h)
    assert accounting.BYTES_PER_PARAM_ADAM_MIXED == 16


def test_saved_bytes_count_what_a_saved_tensors_hook_keeps():
    w = torch.randn(64, 64, requires_grad=True)
    x = torch.randn(32, 64, requires_grad=True)
    plain = accounting.saved_activation_bytes(lambda: (x @ w).relu().sum(), [w])
    halves = (lambda t: (t[: len(t) // 2].clone(), t[len(t) // 2:].clone()),   # kept as two pieces
              lambda pair: torch.cat(pair))
    assert accounting.saved_activation_bytes(lambda: (x @ w).relu().sum(), [w], hooks=halves) == plain
    first_row = (lambda t: t[:1].clone(), lambda t: t)                         # keeps 1/32 of x
    assert accounting.saved_activation_bytes(lambda: (x @ w).sum(), [w], hooks=first_row) == 64 * 4
