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


# --- issue 38 (item 1): the saved-bytes formula follows the device, the dtype and the SDPA kernel ---
CUDA_CHOICES = {  # (card, dtype) -> the kernel PyTorch picks for causal attention, head dimension 64
    ("T4", "float32"): "efficient", ("T4", "bfloat16"): "math",
    ("V100", "float32"): "efficient", ("V100", "bfloat16"): "math",
    ("A100", "float32"): "efficient", ("A100", "bfloat16"): "flash",
    ("L4", "float32"): "efficient", ("L4", "bfloat16"): "flash",
    ("H100", "float32"): "efficient", ("H100", "bfloat16"): "flash",
}


@pytest.mark.parametrize("card, dtype", sorted(CUDA_CHOICES))
def test_sdpa_backend_is_decided_from_the_gpus_capability_and_dtype(card, dtype):
    from course_utils.gpu_facts import KNOWN

    assert accounting.sdpa_backend("cuda", dtype, KNOWN[card].capability, head_dim=64) == CUDA_CHOICES[card, dtype]
    assert accounting.sdpa_backend("cpu", dtype) == "cpu_flash"


@pytest.mark.parametrize("count", [1, 2, 8])
@pytest.mark.parametrize("card, dtype", sorted(CUDA_CHOICES))
def test_sdpa_backend_here_reads_the_faked_gpu(monkeypatch, card, dtype, count):
    from fake_cuda import fake_cuda

    fake_cuda(monkeypatch, card, count=count)
    assert accounting.sdpa_backend_here("cuda", getattr(torch, dtype), 64) == CUDA_CHOICES[card, dtype]
    assert accounting.sdpa_backend_here(torch.device("cuda", 0), dtype, 64) == CUDA_CHOICES[card, dtype]
    assert accounting.sdpa_backend_here("cpu", dtype, 64) == "cpu_flash"


def test_cuda_bf16_and_cpu_fp32_formulas_differ_by_the_statistics_only():
    s, b, h, a = 64, 8, 64, 4
    cpu_fp32 = 16 * s * b * h * 4 + 4 * s * b * 4 + a * s * b * 4
    assert accounting.activation_bytes_block(s, b, h, a, 4) == cpu_fp32
    assert accounting.activation_bytes_block(s, b, h, a, 4, device_type="cpu") == cpu_fp32
    cpu_bf16 = 16 * s * b * h * 2 + 4 * s * b * 2 + a * s * b * 4
    assert accounting.activation_bytes_block(s, b, h, a, 2) == cpu_bf16
    # CUDA: LayerNorm statistics in float32, and flash keeps its RNG seed and offset (24 bytes)
    cuda_bf16 = 16 * s * b * h * 2 + 4 * s * b * 4 + a * s * b * 4 + 24
    assert accounting.activation_bytes_block(s, b, h, a, 2, device_type="cuda", backend="flash") == cuda_bf16
    # fp32 on CUDA runs the efficient kernel: log-sum-exp padded to 32 positions, 16 bytes of RNG state
    s = 50
    cuda_fp32 = 16 * s * b * h * 4 + 4 * s * b * 4 + a * 64 * b * 4 + 16
    assert accounting.activation_bytes_block(s, b, h, a, 4, device_type="cuda", backend="efficient") == cuda_fp32


def test_the_formula_refuses_what_it_does_not_cover():
    with pytest.raises(ValueError, match="math kernel"):
        accounting.activation_bytes_block(64, 1, 64, 4, 2, device_type="cuda", backend="math")
    with pytest.raises(ValueError, match="multiple of 8"):
        accounting.activation_bytes_block(64, 1, 48, 4, 2, device_type="cuda", backend="flash")
    with pytest.raises(ValueError, match="does not run"):
        accounting.activation_bytes_block(64, 1, 64, 4, 2, device_type="cpu", backend="flash")


@pytest.mark.parametrize("s", [64, 50])
@pytest.mark.parametrize("backend", ["flash", "efficient", "cudnn"])
def test_attention_statistics_match_pytorchs_own_kernels_shapes(backend, s):
    """PyTorch's meta functions give each CUDA kernel's outputs (shapes and dtypes) without a GPU:
    the log-sum-exp and the RNG seed and offset it saves for backward must add up to the formula."""
    b, a, hd = 2, 4, 16
    q, k, v = (torch.empty(b, s, a, hd, device="meta", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
    ops = torch.ops.aten
    if backend == "flash":
        _, lse, _, _, _, _, seed, offset, _ = ops._scaled_dot_product_flash_attention(q, k, v, 0.0, True)
    elif backend == "efficient":
        _, lse, seed, offset = ops._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, True)
    else:
        _, lse, _, _, _, _, seed, offset, _ = ops._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, True)
    kept = sum(t.numel() * t.element_size() for t in (lse, seed, offset))
    assert lse.dtype == torch.float32 and kept == accounting.sdpa_saved_stat_bytes(s, b, a, backend)


def test_the_cpu_kernel_keeps_a_float32_log_sum_exp_only():
    b, s, a, hd = 2, 64, 4, 16
    q, k, v = (torch.randn(b, s, a, hd, dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)
    assert lse.dtype == torch.float32 and lse.numel() * 4 == accounting.sdpa_saved_stat_bytes(s, b, a, "cpu_flash")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layernorm_statistics_dtype_follows_pytorchs_rule(dtype):
    """torch._refs.native_layer_norm writes the rule: the input's dtype on the CPU, the accumulation
    dtype (float32) elsewhere — a meta tensor takes the non-CPU path, as a CUDA one does."""
    w, bias = torch.ones(8, dtype=dtype), torch.zeros(8, dtype=dtype)
    for device, device_type in (("cpu", "cpu"), ("meta", "cuda")):
        x = torch.empty(3, 8, dtype=dtype, device=device)
        _, mean, rstd = torch._refs.native_layer_norm(x, [8], w.to(device), bias.to(device), 1e-5)
        assert mean.element_size() == rstd.element_size() == accounting.layernorm_stat_bytes(device_type, dtype)


# --- issue 40: the Llama-style block, both shapes' large tensors, and the loss of a large vocabulary ---
def llama_config(s, h, a, g, f, head_size=None):
    return GPTConfig(vocab_size=50, block_size=s, n_layer=1, n_head=a, d_model=h, n_kv_head=g, head_size=head_size,
                     ffn_hidden=f, bias=False, mlp="swiglu", norm="rmsnorm", positions="rope")


LLAMA_SHAPES = [(2, 32, 64, 4, 2, 96, None), (3, 16, 48, 6, 3, 128, None), (1, 64, 64, 8, 8, 160, None),
                (2, 16, 48, 4, 1, 64, 16)]   # (b, s, h, a, g, f, head_size): MQA, and a·d != h


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("b, s, h, a, g, f, head_size", LLAMA_SHAPES)
def test_activation_bytes_of_a_llama_block_equal_what_autograd_saves(dtype, b, s, h, a, g, f, head_size):
    """Fails if the formula leaves out RoPE's cos/sin, counts K/V at a heads (repeated), or if the
    model's norm is torch.nn.RMSNorm (which keeps x̂ too on the CPU)."""
    from course_utils.llama import Llama

    c = llama_config(s, h, a, g, f, head_size)
    block = Llama(c).blocks[0].to(dtype)
    x = torch.randn(b, s, h, dtype=dtype, requires_grad=True)
    saved = accounting.saved_activation_bytes(lambda: block(x), block.parameters())
    e = x.element_size()
    d = c.head_dim
    by_hand = (4 * h + 2 * a * d + 2 * g * d + 4 * f) * s * b * e + 2 * s * b * 4 + a * s * b * 4 + 2 * s * d * e
    assert saved == accounting.block_activation_bytes(c, s, b, e) == by_hand


@pytest.mark.parametrize("b, s, h, a", [(2, 32, 32, 4), (3, 16, 48, 6)])
def test_the_config_formula_is_the_gpt_blocks_for_gpt_shapes(b, s, h, a):
    c = GPTConfig(vocab_size=50, block_size=s, n_layer=1, n_head=a, d_model=h)
    for e in (4, 2):
        assert accounting.block_activation_bytes(c, s, b, e) == accounting.activation_bytes_block(s, b, h, a, e)
    with pytest.raises(ValueError, match="course_utils.llama.Block"):
        accounting.block_activation_bytes(GPTConfig(n_head=4, d_model=32, n_kv_head=2), s, b, 2)


def _saved_by_place(fn, parameters, tokens, h):
    """Bytes autograd saves, sorted by the size of each storage: ``tokens`` × h values (the
    residual stream's width: outside the tensor-parallel regions), other large ones (inside), and
    fewer than 16 values per token (the norms' and attention's per-row statistics, RoPE's tables)."""
    skip = {p.untyped_storage().data_ptr() for p in parameters}
    places: dict[int, tuple[str, int]] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            values = storage.nbytes() // t.element_size()
            place = "small" if values < 16 * tokens else ("outside" if values == tokens * h else "inside")
            places[storage.data_ptr()] = (place, storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return {place: sum(n for p, n in places.values() if p == place) for place in ("outside", "inside", "small")}


@pytest.mark.parametrize("kind", ["gpt", "llama"])
def test_block_saved_values_are_what_autograd_keeps_outside_and_inside(kind):
    """block_saved_values' (outside, inside) per token, times s·b·4, equals the float32 tensors a
    block keeps, sorted by where tensor parallelism puts them (shapes with a·d != h so that the
    attention's tensors cannot pass for the residual stream's). Fails if the Llama block's norm
    keeps x̂ (torch.nn.RMSNorm: outside 6h), or if K/V were kept at a heads."""
    from course_utils import gpt, llama

    b, s = 2, 16
    if kind == "gpt":
        c = GPTConfig(vocab_size=50, block_size=s, n_layer=1, n_head=4, d_model=48)
        block = gpt.GPT(c).blocks[0]
    else:
        c = llama_config(s, 48, 4, 2, 80, head_size=16)
        block = llama.Llama(c).blocks[0]
    x = torch.randn(b, s, c.d_model, requires_grad=True)
    places = _saved_by_place(lambda: block(x), block.parameters(), s * b, c.d_model)
    outside, inside = accounting.block_saved_values(c)
    if kind == "gpt":   # a·d = h: q, k, v and the attention output (4h, inside) look like the residual stream
        moved = 4 * c.d_model * s * b * 4
        places["outside"], places["inside"] = places["outside"] - moved, places["inside"] + moved
    assert (places["outside"], places["inside"]) == (outside * s * b * 4, inside * s * b * 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cross_entropy_saved_bytes_whole_and_chunked(dtype):
    """The whole-vocabulary loss keeps the float32 log-probabilities (4·N·V); the chunked one
    keeps only its inputs. Fails if the chunked loss kept its chunks' logits (e.g. written as a
    plain loop of F.cross_entropy over chunks, without recomputation)."""
    from course_utils import losses

    n, h, v = 256, 64, 32_000
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(n, h, generator=gen).to(dtype).requires_grad_()
    weight = (torch.randn(v, h, generator=gen) * 0.1).to(dtype).requires_grad_()
    targets = torch.randint(0, v, (n,), generator=gen)
    e = hidden.element_size()
    whole = accounting.saved_activation_bytes(
        lambda: losses.cross_entropy_from_hidden(hidden, weight, targets), [weight])
    chunked = accounting.saved_activation_bytes(
        lambda: losses.chunked_cross_entropy(hidden, weight, targets, 64), [weight])
    assert whole == accounting.cross_entropy_saved_bytes(n, h, v, e) == n * h * e + 8 * n + 4 * n * v + 4
    assert chunked == accounting.cross_entropy_saved_bytes(n, h, v, e, chunked=True) == n * h * e + 8 * n
    assert whole / chunked > 400


def test_peak_tensor_bytes_counts_new_storages_while_they_live():
    """Hand-counted: views, in-place results and tensors from before are not new; a freed tensor
    stops counting. Fails if views counted (x.t() would add 4,000 bytes) or frees were missed."""
    x = torch.randn(1000)

    def one_after_another():
        y = x * 2
        z = y + 1
        del y                               # freed: the next one takes its place
        w = z * 3
        x.t(), x.view(-1), z.add_(1)        # views and an in-place op: no new storage
        return w

    def three_then_sums():
        a, b, c = x * 2, x * 3, x * 4
        return a + b + c                    # (a + b) lives until the last add: 5 tensors at once

    assert accounting.peak_tensor_bytes(one_after_another) == 2 * 4000
    assert accounting.peak_tensor_bytes(three_then_sums) == 5 * 4000


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_whole_losss_backward_holds_three_float32_n_by_v_tensors(dtype):
    """Whole loss: 3·N·V·4 bytes (+ 8) at once, as cross_entropy_saved_bytes' docstring says; the
    chunked loss holds less, the less the smaller its chunks. Fails if the chunked backward made
    all N rows' probabilities at once."""
    from course_utils import losses

    n, h, v = 256, 64, 32_000
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(n, h, generator=gen).to(dtype).requires_grad_()
    weight = (torch.randn(v, h, generator=gen) * 0.1).to(dtype).requires_grad_()
    targets = torch.randint(0, v, (n,), generator=gen)

    def peak(chunk=None):
        def step():
            loss = (losses.cross_entropy_from_hidden(hidden, weight, targets) if chunk is None
                    else losses.chunked_cross_entropy(hidden, weight, targets, chunk))
            loss.backward()
        hidden.grad = weight.grad = None
        return accounting.peak_tensor_bytes(step)

    whole, by_64, by_16 = peak(), peak(64), peak(16)
    assert whole == 3 * n * v * 4 + 8
    assert by_16 < by_64 < whole / 2
