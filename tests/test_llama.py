"""course_utils.llama: the published Llama 3.1 parameter totals, training, grouped-query attention,
rotary positions, the RMSNorm's gradients, and FLOPs as FlopCounterMode counts them.

Each test names (in its docstring) a planted bug that makes it fail."""
import pytest
import torch
from torch.nn import functional as F

from course_utils import accounting, llama, losses, shape
from course_utils.llama import Llama
from course_utils.shape import GPTConfig

SMALL = dict(vocab_size=61, block_size=32, n_layer=2, n_head=4, d_model=32, n_kv_head=2, ffn_hidden=80,
             bias=False, mlp="swiglu", norm="rmsnorm", positions="rope")


def small(**changes) -> GPTConfig:
    return GPTConfig(**{**SMALL, **changes})


def tokens(b: int, t: int, vocab: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", sorted(shape.LLAMA_3_1))
def test_llama_3_1_parameters_equal_the_published_totals(name):
    """Built on the meta device, the model has the published number of parameters, as the shape's
    formula says. Fails with a tied head, two MLP matrices, or K/V projections of width h."""
    config = shape.LLAMA_3_1[name]
    with torch.device("meta"):
        model = Llama(config)
    counted = sum(p.numel() for p in model.parameters())
    assert counted == config.params == shape.LLAMA_3_1_PUBLISHED_PARAMS[name]
    assert sum(p.numel() for p in model.blocks[0].parameters()) == sum(config.block_params())


def test_gpt2_shapes_are_refused_with_the_way_out():
    with pytest.raises(ValueError, match="course_utils.gpt.GPT"):
        Llama(GPTConfig())
    with pytest.raises(ValueError, match="bias"):
        Llama(small(bias=True))


def test_a_small_llama_trains():
    """Every weight gets a gradient, and fifty AdamW steps on one batch of random tokens bring the
    loss from about ln V to below a third of it. Fails if a part of the model is cut off from the
    loss (a ``detach()`` on the blocks' or the MLP's output: the head alone still memorises the
    batch, so the loss alone would not notice)."""
    torch.manual_seed(0)
    config = small()
    model = Llama(config, seed=0)
    idx = tokens(4, config.block_size + 1, config.vocab_size)
    x, y = idx[:, :-1], idx[:, 1:]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for step in range(50):
        _, loss = model(x, y)
        loss.backward()
        if step == 0:
            assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert abs(losses[0] - torch.log(torch.tensor(61.0)).item()) < 0.3 and losses[-1] < losses[0] / 3


def test_initial_weights_depend_on_the_seed_only():
    torch.manual_seed(1)
    a = Llama(small(), seed=3).state_dict()
    torch.manual_seed(2)
    b = Llama(small(), seed=3).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["blocks.0.attn.q.weight"], Llama(small(), seed=4).state_dict()["blocks.0.attn.q.weight"])


def test_grouped_query_attention_equals_multi_head_attention_with_repeated_kv_weights():
    """A model with g = 2 K/V heads gives the logits of one with a = 4 K/V heads whose K/V weights
    repeat each group's for the query heads it serves (head i reads group i // (a/g)). Fails if
    attention pairs query heads with K/V heads in another order (``repeat`` instead of
    ``repeat_interleave``, i.e. head i reading group i % g)."""
    gqa = Llama(small(n_kv_head=2), seed=0)
    mha = Llama(small(n_kv_head=4), seed=0)
    state = gqa.state_dict()
    d, rep = gqa.config.head_dim, 2
    for name, w in state.items():
        if name.endswith(("attn.k.weight", "attn.v.weight")):
            state[name] = w.view(-1, d, w.shape[1]).repeat_interleave(rep, dim=0).reshape(-1, w.shape[1])
    mha.load_state_dict(state)
    idx = tokens(2, 32, 61)
    torch.testing.assert_close(gqa(idx), mha(idx), rtol=1e-5, atol=1e-5)
    assert llama.repeat_kv(torch.arange(2.0).view(1, 2, 1, 1), 2).flatten().tolist() == [0, 0, 1, 1]


def test_a_rank_holding_later_positions_gets_the_full_sequences_logits():
    """Causal, with true positions: the first m tokens alone give the full sequence's first m
    logits; a rank holding tokens m..T-1, passing ``positions`` m..T-1 and an ``attend`` that
    prepends the earlier tokens' K/V (as a context-parallel rank receives them), gives the full
    sequence's last T-m logits. Fails if RoPE ignores ``positions`` (rotates by 0..T-m-1), or if
    the attention is not causal."""
    model = Llama(small(), seed=0)
    idx, m = tokens(2, 32, 61), 12
    full = model(idx)
    torch.testing.assert_close(model(idx[:, :m]), full[:, :m], rtol=1e-5, atol=1e-5)

    earlier = []   # per layer, the K/V of positions 0..m-1 (after RoPE)

    def record(q, k, v):
        earlier.append((k, v))
        return llama.causal_attention(q, k, v)

    def with_earlier(layer):
        def attend(q, k, v):
            k0, v0 = earlier[layer]
            k, v = torch.cat((k0, k), dim=2), torch.cat((v0, v), dim=2)
            T, S = q.shape[2], k.shape[2]
            mask = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)   # query m+i sees keys 0..m+i
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return attend

    for block in model.blocks:
        block.attn.attend = record
    model(idx[:, :m])
    for i, block in enumerate(model.blocks):
        block.attn.attend = with_earlier(i)
    later = model(idx[:, m:], positions=torch.arange(m, 32))
    torch.testing.assert_close(later, full[:, m:], rtol=1e-5, atol=1e-5)


def test_rotary_scores_depend_on_the_position_difference_only():
    """q·k after RoPE at positions (i, j) equals q·k at (i + c, j + c), and differs from
    (i, j + 1). Fails with a rotation whose pairs do not match ``rotate_half``'s (angles laid out
    (θ0, θ0, θ1, θ1, ...) with pairs (i, i + d/2)): not a rotation, not relative."""
    d, theta = 16, 10_000.0
    q, k = torch.randn(2, d, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def score(i: int, j: int) -> float:
        cos, sin = llama.rope_cos_sin(torch.tensor([i, j]), d, theta, torch.float64)
        qr = llama.apply_rope(q[None], cos[:1], sin[:1])
        kr = llama.apply_rope(k[None], cos[1:], sin[1:])
        return float(qr @ kr.T)

    for i, j in ((0, 0), (5, 2), (3, 9)):
        for c in (1, 17, 1000):
            assert score(i + c, j + c) == pytest.approx(score(i, j), rel=1e-4, abs=1e-4)   # float32 angles
    assert score(5, 3) != pytest.approx(score(5, 2), rel=1e-3)
    # a shift of every position by the same amount leaves a whole model's logits unchanged
    model = Llama(small(block_size=64), seed=0)
    idx = tokens(1, 16, 61)
    torch.testing.assert_close(model(idx, positions=torch.arange(40, 56)), model(idx), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_rmsnorm_matches_torchs_and_keeps_its_input_and_one_float32_per_row(dtype):
    """Output and gradients equal ``F.rms_norm``'s (float64); autograd keeps the input and a
    float32 1/rms per row (float64 for a float64 input). Fails if backward leaves out the −x̂·mean(g·x̂) term."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 24, generator=gen, dtype=torch.float64).to(dtype).requires_grad_()
    norm = llama.RMSNorm(24).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(24, generator=gen))
    y = norm(x)
    grad = torch.randn(y.shape, generator=gen, dtype=torch.float64).to(dtype)
    gx, gw = torch.autograd.grad(y, (x, norm.weight), grad)
    x32, w32 = x.detach().double().requires_grad_(), norm.weight.detach().double().requires_grad_()
    y32 = F.rms_norm(x32, (24,), w32, norm.eps)
    rx, rw = torch.autograd.grad(y32, (x32, w32), grad.double())
    tol = dict(rtol=1e-9, atol=1e-9) if dtype == torch.float64 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(y.double(), y32.detach(), **tol)
    torch.testing.assert_close(gx.double(), rx, **tol)
    torch.testing.assert_close(gw.double(), rw, **tol)
    saved = accounting.saved_activation_bytes(lambda: norm(x), norm.parameters())
    assert saved == x.numel() * x.element_size() + 3 * 5 * max(4, x.element_size())


def test_training_flops_are_what_flop_counter_mode_counts():
    """One training step counted by ``accounting.count_flops`` (matmuls only, 2 FLOPs per
    multiply-add; attention on the math kernel, which computes every score, masked half included)
    equals ``train_flops_per_token(causal=False)`` per token: 6N with N counting q (h·a·d), k and v
    (h·g·d each), proj, three SwiGLU matrices and the head, plus 12·L·s·a·d. Fails if N counts
    K/V projections of width h (MHA) or two MLP matrices."""
    config = small()
    model, b, s = Llama(config), 2, config.block_size
    idx = tokens(b, s, config.vocab_size)

    def step():
        _, loss = model(idx, idx)
        loss.backward()

    counted = accounting.count_flops(step)
    assert counted == config.train_flops_per_token(causal=False) * b * s
    assert accounting.count_flops(lambda: model(idx)) * 3 == counted
    assert config.train_flops_per_token(causal=True) < config.train_flops_per_token()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk", [7, 64, 1000])
def test_chunked_cross_entropy_gives_the_models_loss_and_gradients(dtype, chunk):
    """The loss over chunks of tokens, logits recomputed in backward, equals the model's own loss,
    and the gradients of every weight agree. Fails if backward forgets to divide by N, or skips the
    one-hot term (softmax instead of softmax − one-hot), or if a last, shorter chunk is dropped."""
    from course_utils import losses

    config = small(vocab_size=500)
    idx = tokens(3, 20, config.vocab_size)
    targets = tokens(3, 20, config.vocab_size, seed=1)
    grads, values = [], []
    for use_chunks in (False, True):
        model = Llama(config, seed=0).to(dtype)
        if use_chunks:
            loss = losses.chunked_cross_entropy(model.features(idx).flatten(0, 1), model.head.weight,
                                                targets.flatten(), chunk)
        else:
            _, loss = model(idx, targets)
        loss.backward()
        values.append(loss.float())
        grads.append({n: p.grad.float() for n, p in model.named_parameters()})
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=2e-2, atol=1e-3)
    torch.testing.assert_close(values[1], values[0], **tol)
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], **tol, msg=name)
    with pytest.raises(ValueError, match="flatten"):
        losses.chunked_cross_entropy(torch.zeros(2, 3, 4), torch.zeros(5, 4), torch.zeros(2, 3, dtype=torch.long))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_measured_choices_gqa_through_sdpa_and_an_rmsnorm_that_keeps_its_input(dtype):
    """What the module docstring says each choice saves, measured on one block: K/V repeated before
    attention keep 2·(a − g)·d more values per token; torch.nn.RMSNorm (a composite of ops on the
    CPU) keeps per norm and token 4h more bytes in float32 (x̂) and 6h more in bf16 (float32
    copies of x and x̂ instead of x). Fails if either alternative became what the model does."""
    config = small(block_size=16)
    b, s, h, a, g, d = 2, 16, config.d_model, config.n_head, config.kv_heads, config.head_dim
    x = torch.randn(b, s, h, dtype=dtype, requires_grad=True)

    def saved(block):
        return accounting.saved_activation_bytes(lambda: block(x), block.parameters())

    base = saved(Llama(config).blocks[0].to(dtype))
    repeated = Llama(config).blocks[0].to(dtype)
    repeated.attn.attend = lambda q, k, v: llama.causal_attention(q, *(llama.repeat_kv(t, a // g) for t in (k, v)))
    assert saved(repeated) - base == 2 * (a - g) * d * s * b * x.element_size()
    torch_norms = Llama(config).blocks[0].to(dtype)
    torch_norms.ln_1, torch_norms.ln_2 = (torch.nn.RMSNorm(h, eps=1e-5).to(dtype) for _ in range(2))
    assert saved(torch_norms) - base == 2 * s * b * h * (4 if dtype == torch.float32 else 6)


def test_chunked_cross_entropy_refuses_ignored_positions():
    """No ignore_index: a -100 (PyTorch's default padding id) would index the head's gradient out of
    range in backward; it is refused up front with what to do. Fails if the check is removed."""
    hidden, weight = torch.randn(4, 8, requires_grad=True), torch.randn(16, 8, requires_grad=True)
    for bad in (torch.tensor([1, 2, -100, 3]), torch.tensor([1, 2, 16, 3])):
        with pytest.raises(ValueError, match="no ignore_index"):
            losses.chunked_cross_entropy(hidden, weight, bad, chunk=2)
