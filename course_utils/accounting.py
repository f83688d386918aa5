"""What a transformer costs: parameters, FLOPs, activation bytes, model-state bytes — as formulas,
and the two instruments that check them on a real model.

Notation (Megatron's, Korthikanti et al. 2022): ``s`` sequence length, ``b`` micro-batch size,
``h`` hidden size, ``a`` attention heads, ``L`` layers, ``V`` vocabulary size; the functions that
take a model's shape name it as ``course_utils.shape.GPTConfig`` does (``d_model`` = h,
``n_head`` = a, ``n_layer`` = L, ``vocab_size`` = V, ``block_size``).
The formulas describe :class:`course_utils.gpt.GPT`: pre-LayerNorm blocks with biases, separate
q/k/v projections, a 4h MLP, no dropout, an untied output head; :func:`block_activation_bytes` and
:func:`block_saved_values` also :class:`course_utils.llama.Llama`'s block (RMSNorm, SwiGLU, RoPE,
grouped-query attention), and :func:`cross_entropy_saved_bytes` the loss of a large vocabulary,
whole or chunked (:mod:`course_utils.losses`).

- :func:`count_flops` counts with ``torch.utils.flop_counter.FlopCounterMode``, running attention
  through PyTorch's *math* SDPA kernel: the fused CPU kernel is not registered with the counter
  and would count as zero FLOPs.
- :func:`saved_activation_bytes` adds up the tensors autograd saves for backward during one
  forward (each storage once, parameters excluded): what activation memory really is.
- :func:`peak_tensor_bytes` follows every new tensor an op makes until it is freed, forward and
  backward: the most bytes alive at once (what a loss's backward briefly needs, for instance).
"""
from __future__ import annotations

from collections.abc import Callable

BYTES_PER_PARAM_ADAM_MIXED = 2 + 2 + 4 + 4 + 4
"""ZeRO's split of mixed-precision Adam (Rajbhandari et al. 2019, arXiv:1910.02054, §3.1): 16-bit
weights and gradients (2 + 2), fp32 master weights and Adam's two moments (4 + 4 + 4). PyTorch AMP
and FSDP2's MixedPrecisionPolicy also reach 16, by another split: fp32 parameters and gradients
and the two moments (4 + 4 + 4 + 4), the bf16 weights only temporary copies."""

BYTES_PER_PARAM_MEGATRON_BF16 = 2 + 4 + 4 + 4 + 4
"""Megatron-LM with bf16 parameters and fp32 "main" gradients: bf16 weights (2), fp32 gradients
(4), fp32 master weights and Adam's moments (4 + 4 + 4) — 18, its distributed-optimizer table
(https://docs.nvidia.com/megatron-core/developer-guide/latest/distrib_optimizer.html)."""


def block_params(d_model: int, bias: bool = True) -> int:
    """Parameters of one block of width h = ``d_model``: q, k, v, proj (4 h², + 4 h biases), the MLP
    (8 h², + 5 h biases), two LayerNorms (2 h weights, + 2 h biases): 12 h² + 13 h with biases,
    12 h² + 2 h without."""
    h = d_model
    return 12 * h * h + (13 * h if bias else 2 * h)


def gpt_params(vocab_size: int, block_size: int, n_layer: int, d_model: int, bias: bool = True) -> dict[str, int]:
    """Parameters by part: embeddings (tokens and positions), blocks, final LayerNorm, head, total."""
    h = d_model
    parts = {"token embedding": vocab_size * h, "position embedding": block_size * h,
             "blocks": n_layer * block_params(h, bias), "final LayerNorm": 2 * h if bias else h,
             "head": h * vocab_size}
    return {**parts, "total": sum(parts.values())}


def matmul_params(vocab_size: int, n_layer: int, d_model: int) -> int:
    """Weights that multiply every token (``N`` in "6 N"): the blocks' 12 h² per layer and the head's
    h·V. Embedding lookups, biases and LayerNorms do (almost) no multiplications."""
    return n_layer * 12 * d_model * d_model + d_model * vocab_size


def train_flops_per_token(vocab_size: int, n_layer: int, d_model: int, s: int) -> int:
    """FLOPs of one training step per token of an ``s``-token sequence: 6 N (forward 2 N, backward
    4 N) plus attention's own matmuls, scores q·kᵀ and the weighted sum of v: 4 s h per layer
    forward, 12 s h in all. (A causal kernel may skip the masked half; the math kernel and this
    count do not.)"""
    return 6 * matmul_params(vocab_size, n_layer, d_model) + 12 * n_layer * s * d_model


def activation_bytes_megatron(s: int, b: int, h: int, a: int) -> int:
    """Korthikanti et al.'s activation memory of one layer in 16-bit, with dropout and the attention
    scores materialised: s·b·h·(34 + 5·a·s/h) bytes."""
    return s * b * h * 34 + 5 * a * s * s * b


SDPA_RNG_BYTES = {"cpu_flash": 0, "flash": 2 * 8 + 8, "efficient": 8 + 8, "cudnn": 8 + 8}
"""Bytes of the dropout RNG state a fused kernel saves for backward, even with no dropout: the
flash kernel a uint64 pair (seed, offset) plus an unused uint64 scalar, the efficient and cuDNN
kernels an int64 seed and an int64 offset (PyTorch's meta functions for these ops,
``torch/_meta_registrations.py``; tests/test_accounting.py checks them)."""


def _dtype_name(dtype) -> str:
    """"bfloat16" for torch.bfloat16 or "bfloat16"."""
    return str(dtype).removeprefix("torch.")


def sdpa_backend(device_type: str, dtype, capability: tuple[int, int] | None = None, head_dim: int = 64) -> str:
    """The kernel PyTorch picks for this course's attention (causal, no mask, no dropout), from
    device facts: ``device_type`` "cpu" or "cuda", ``dtype`` (a torch dtype or its name), a CUDA
    GPU's compute ``capability`` (e.g. (9, 0), :mod:`course_utils.gpu_facts`) and ``head_dim`` = h/a.

    PyTorch tries flash, then efficient, then math (``torch._C._get_sdp_priority_order()``; cuDNN's
    kernel only when asked for with ``sdpa_kernel``). Flash needs Ampere (sm80) or newer, 16-bit
    inputs and a head dimension up to 256; the efficient kernel runs float32 and float16 from sm50
    and bfloat16 from sm80. Otherwise (a T4 or V100 in bfloat16): math.
    """
    name = _dtype_name(dtype)
    if device_type == "cpu":
        return "cpu_flash"
    if device_type != "cuda":
        raise ValueError(f"device_type must be 'cpu' or 'cuda', not {device_type!r}")
    if capability is None:
        raise ValueError("a CUDA device needs its compute capability, e.g. gpu_facts.KNOWN['H100'].capability")
    if capability >= (8, 0) and name in ("float16", "bfloat16") and head_dim <= 256:
        return "flash"
    if capability >= (5, 0) and (name in ("float32", "float16") or (name == "bfloat16" and capability >= (8, 0))):
        return "efficient"
    return "math"


def sdpa_backend_here(device, dtype, head_dim: int) -> str:
    """:func:`sdpa_backend` for ``device`` ("cpu", "cuda", a torch.device) of this machine, its
    capability read from :func:`course_utils.gpu_facts.current` (the GPU single-process cells use)."""
    from course_utils import gpu_facts

    device_type = str(device).split(":")[0]
    gpu = gpu_facts.current() if device_type == "cuda" else None
    return sdpa_backend(device_type, dtype, gpu.capability if gpu else None, head_dim)


def sdpa_saved_stat_bytes(s: int, b: int, a: int, backend: str) -> int:
    """Bytes a fused attention kernel saves for backward besides q, k, v and its output: the
    log-sum-exp per head and position (float32; the efficient kernel pads s up to a multiple of
    32) and, on CUDA, the dropout RNG state (:data:`SDPA_RNG_BYTES`). The math kernel keeps the
    a·s²·b attention probabilities instead: not covered (ValueError)."""
    if backend not in SDPA_RNG_BYTES:
        raise ValueError(f"backend {backend!r}: this count covers the fused kernels {sorted(SDPA_RNG_BYTES)}; "
                         "the math kernel keeps the s×s attention probabilities")
    positions = -(-s // 32) * 32 if backend == "efficient" else s
    return a * positions * b * 4 + SDPA_RNG_BYTES[backend]


def layernorm_stat_bytes(device_type: str, dtype) -> int:
    """Bytes of each LayerNorm statistic (mean, 1/std) per row: in the input's dtype on the CPU, in
    float32 (the accumulation type) for 16-bit inputs on CUDA — as ``torch._refs.native_layer_norm``
    writes the rule."""
    size = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}[_dtype_name(dtype)]
    return size if device_type == "cpu" else max(size, 4)


def activation_bytes_block(s: int, b: int, h: int, a: int, element_bytes: int = 2, *,
                           device_type: str = "cpu", backend: str | None = None) -> int:
    """The same count adapted, term by term, to a :class:`~course_utils.gpt.Block` (no dropout, a
    fused attention kernel that keeps no s×s scores), in activations of ``element_bytes`` each
    (4: float32, 2: bfloat16), on ``device_type`` "cpu" or "cuda" with the SDPA ``backend`` of
    :func:`sdpa_backend` (default: the CPU's fused kernel on "cpu", flash on "cuda"):

    - each LayerNorm's input (2 × sbh) and output, which feeds q/k/v and fc (2 × sbh);
    - q, k, v (3 sbh) and the attention output (sbh), which the fused kernel keeps and which is
      also proj's input (the kernel writes it in the (b, s, a, h/a) layout, so the reshape is a
      view): together they replace Megatron's softmax output, dropout mask and dropout output
      (5·a·s²·b bytes) and its separate proj input;
    - the MLP's fc output (4 sbh, GELU's input) and GELU's output (4 sbh, proj's input);
    - no dropout masks (Megatron's 2 sbh bytes).

    That is 16 sbh activations, plus small statistics, which depend on the device and the kernel:

    - each LayerNorm's mean and 1/std, 2 sb values each (:func:`layernorm_stat_bytes`: the
      activation dtype on the CPU, float32 on CUDA);
    - the attention's log-sum-exp per head and position, float32: a·s·b values (the efficient
      kernel pads s up to a multiple of 32), and the RNG seed and offset the CUDA kernels keep for
      dropout, even at p = 0 (:func:`sdpa_saved_stat_bytes`, a few bytes).

    The math kernel keeps the a·s²·b attention probabilities instead: not this formula (ValueError);
    nor is a head dimension h/a that is not a multiple of 8 on CUDA (the kernels pad copies of q, k, v).
    """
    backend = backend or ("cpu_flash" if device_type == "cpu" else "flash")
    if (backend == "cpu_flash") != (device_type == "cpu"):
        raise ValueError(f"backend {backend!r} does not run on {device_type!r}")
    if device_type != "cpu" and (h // a) % 8:
        raise ValueError(f"head dimension {h // a}: the CUDA kernels pad it to a multiple of 8, copies "
                         "this formula does not count")
    dtype = {4: "float32", 2: "bfloat16", 8: "float64"}[element_bytes]
    return (16 * s * b * h * element_bytes + 2 * 2 * s * b * layernorm_stat_bytes(device_type, dtype)
            + sdpa_saved_stat_bytes(s, b, a, backend))


def block_saved_values(config) -> tuple[int, int]:
    """Values one block of ``config`` (a ``course_utils.shape.GPTConfig``, dense) keeps for backward
    per token, with a fused attention kernel, no dropout and no recomputation, large tensors only
    (the norms' and the kernel's per-row statistics left out), split by where tensor parallelism
    puts them: (outside, inside).

    - outside the tensor-parallel regions: each norm's input and output (2 × 2h), copies on every
      TP rank unless sequence parallelism splits them;
    - inside, split over the TP ranks by heads or columns: q (a·d), k and v (g·d each, g K/V heads),
      the attention output (a·d) and the MLP's intermediates: GELU's input and output (2f), or
      SwiGLU's gate and up outputs, silu(gate) and the product (4f).

    GPT-2's block (``course_utils.gpt.Block``): (4h, 12h), :func:`activation_bytes_block`'s 16h.
    Both shapes are measured (tests/test_accounting.py: the tensors autograd saves, sorted by
    their last dimension): the Llama block's norms are :class:`course_utils.llama.RMSNorm`, which
    keeps its input and 1/rms as a fused kernel does; ``torch.nn.RMSNorm`` on the CPU keeps the
    normalised x̂ too (one more h outside, float32 copies for bf16 inputs).
    """
    h, q, kv, f = config.d_model, config.n_head * config.head_dim, config.kv_heads * config.head_dim, config.mlp_width
    return 4 * h, 2 * q + 2 * kv + (2 if config.mlp == "gelu" else 4) * f


RMSNORM_STAT_BYTES = 4
"""Bytes of the one statistic :class:`course_utils.llama.RMSNorm` keeps per row (1/rms, float32
for float32 and 16-bit inputs)."""


def _built_shape(config) -> str:
    """"gpt" or "llama": which of the course's models builds ``config``; ValueError for neither."""
    gpt = (config.mlp, config.norm, config.positions) == ("gelu", "layernorm", "learned")
    llama = (config.mlp, config.norm, config.positions, config.bias) == ("swiglu", "rmsnorm", "rope", False)
    if config.n_expert or not (llama or (gpt and config.kv_heads == config.n_head
                                         and config.n_head * config.head_dim == config.d_model)):
        raise ValueError("this count covers the blocks the course builds: course_utils.gpt.Block (gelu, layernorm, "
                         "learned positions, as many K/V heads as heads, head_dim·n_head = d_model) and "
                         "course_utils.llama.Block (swiglu, rmsnorm, rope, no biases), dense; got "
                         f"mlp={config.mlp!r}, norm={config.norm!r}, positions={config.positions!r}, "
                         f"n_kv_head={config.n_kv_head}, head_size={config.head_size}, n_expert={config.n_expert}")
    return "llama" if llama else "gpt"


def block_activation_bytes(config, s: int, b: int, element_bytes: int = 2, *, device_type: str = "cpu",
                           backend: str | None = None) -> int:
    """Bytes one block of ``config`` (a ``course_utils.shape.GPTConfig`` that ``gpt.GPT`` or
    ``llama.Llama`` builds) keeps for backward for ``b`` sequences of ``s`` tokens, activations of
    ``element_bytes`` each (4: float32, 2: bfloat16), no dropout, no recomputation, on
    ``device_type`` with the SDPA ``backend`` (as in :func:`activation_bytes_block`, which this
    equals for the GPT's block). Term by term, h = d_model, a = n_head, g = K/V heads, d = head_dim,
    f = the MLP's width:

    - large tensors, :func:`block_saved_values` per token: each norm's input and output (4h); q,
      k and v as attention receives them (after RoPE for q and k: a·d + 2·g·d; the fused kernel
      takes K/V at g heads with ``enable_gqa``), the attention output, which is also proj's input
      (a·d); the MLP's GELU input and output (2f), or SwiGLU's gate and up outputs, silu(gate) and
      the product, down's input (4f);
    - the norms' statistics per row: LayerNorm's mean and 1/std, 2 × 2 per token
      (:func:`layernorm_stat_bytes`), or the RMSNorm's 1/rms, 2 × 1 per token, float32
      (:data:`RMSNORM_STAT_BYTES`);
    - attention's log-sum-exp per head and position, float32, and on CUDA the kernel's RNG state
      (:func:`sdpa_saved_stat_bytes`);
    - RoPE: the cos and sin tables the rotation keeps, s × d each in the activation dtype, once
      per block (shared by q and k and by the b sequences; each block computes its own).

    Measured on the CPU in float32 and bfloat16 (tests/test_accounting.py, and chapter 13). On CUDA
    the statistics' terms are the GPT block's (checked against PyTorch's meta kernels); that flash
    takes K/V at g heads there is PyTorch's documented ``enable_gqa`` path, not measured here.
    """
    kind = _built_shape(config)
    if kind == "gpt":
        return activation_bytes_block(s, b, config.d_model, config.n_head, element_bytes,
                                      device_type=device_type, backend=backend)
    backend = backend or ("cpu_flash" if device_type == "cpu" else "flash")
    if (backend == "cpu_flash") != (device_type == "cpu"):
        raise ValueError(f"backend {backend!r} does not run on {device_type!r}")
    if device_type != "cpu" and config.head_dim % 8:
        raise ValueError(f"head dimension {config.head_dim}: the CUDA kernels pad it to a multiple of 8, copies "
                         "this formula does not count")
    large = sum(block_saved_values(config)) * s * b * element_bytes
    norms = 2 * s * b * RMSNORM_STAT_BYTES
    rope = 2 * s * config.head_dim * element_bytes
    return large + norms + sdpa_saved_stat_bytes(s, b, config.n_head, backend) + rope


def cross_entropy_saved_bytes(tokens: int, d_model: int, vocab_size: int, element_bytes: int = 2,
                              chunked: bool = False) -> int:
    """Bytes the output head and the loss keep for backward for ``tokens`` tokens (N), hidden states
    of ``element_bytes`` each: the head's input, N·h·element_bytes, and the int64 targets, 8·N;
    then for the whole-vocabulary loss (:func:`course_utils.losses.cross_entropy_from_hidden`:
    float32 softmax over the N × V logits) the float32 log-probabilities, 4·N·V (kept by
    log_softmax and nll_loss, one storage), and nll_loss's float32 total weight (4 bytes); for
    :func:`course_utils.losses.chunked_cross_entropy` nothing more. The logits themselves are not
    kept (the head's output, cast to float32, is freed once the softmax is taken), but the whole
    loss's backward makes their gradient: measured with :func:`peak_tensor_bytes`, forward and
    backward of the whole loss hold at most 3·N·V·4 bytes (+ 8: two float32 scalars) of new
    tensors at once — the log-probabilities, the gradient nll_loss hands back and log_softmax's —
    where the chunked one holds a chunk's logits and the head's float32 weight gradient."""
    kept = tokens * d_model * element_bytes + 8 * tokens
    return kept if chunked else kept + 4 * tokens * vocab_size + 4


def count_flops(fn: Callable[[], object]) -> int:
    """FLOPs of ``fn()`` as ``FlopCounterMode`` counts them, attention on the math SDPA kernel."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def saved_activation_bytes(fn: Callable[[], object], parameters=(), hooks: tuple | None = None) -> int:
    """Bytes of the tensors autograd saves for backward while ``fn()`` runs: every storage counted
    once (views of one tensor share it), ``parameters`` (weights saved by matmuls) left out.
    A DTensor counts as its local shard: the bytes this rank holds. ``hooks``, a (pack, unpack)
    pair for ``saved_tensors_hooks`` that changes what is kept (e.g. a slice, gathered again in
    backward), is applied, and what its ``pack`` returns is counted."""
    import torch

    def storage_of(tensor):
        if hasattr(tensor, "to_local"):   # a DTensor wraps this rank's shard
            with torch.no_grad():
                tensor = tensor.to_local()
        return tensor.untyped_storage()

    skip = {storage_of(p).data_ptr() for p in parameters}
    storages: dict[int, int] = {}
    inner_pack, inner_unpack = hooks or (lambda tensor: tensor, lambda tensor: tensor)

    def pack(tensor):
        kept = inner_pack(tensor)
        if storage_of(tensor).data_ptr() in skip:   # a weight, however the hook keeps it
            return kept
        for t in kept if isinstance(kept, (tuple, list)) else (kept,):
            if isinstance(t, torch.Tensor) and storage_of(t).data_ptr() not in skip:
                storages[storage_of(t).data_ptr()] = storage_of(t).nbytes()
        return kept

    with torch.autograd.graph.saved_tensors_hooks(pack, inner_unpack):
        fn()
    return sum(storages.values())


def peak_tensor_bytes(fn: Callable[[], object]) -> int:
    """The most bytes of tensors that ``fn()`` creates alive at once, forward and backward: every
    op's new storage counted from the op that makes it until it is freed (views and in-place
    results are not new storage; tensors that existed before ``fn()`` are not counted). What a
    caching allocator's live ("allocated") peak shows, without its rounding and its cached free
    blocks ("reserved"), and without kernels' private scratch memory, which no op returns."""
    import weakref

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Tracker(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.live, self.peak, self.alive = 0, 0, set()

        def _freed(self, key: int, nbytes: int) -> None:
            self.alive.discard(key)
            self.live -= nbytes

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                      if isinstance(t, torch.Tensor)}
            for t in tree_flatten(out)[0]:
                if not isinstance(t, torch.Tensor):
                    continue
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if storage.nbytes() and key not in inputs and key not in self.alive:
                    self.alive.add(key)
                    self.live += storage.nbytes()
                    weakref.finalize(storage, self._freed, key, storage.nbytes())
            self.peak = max(self.peak, self.live)
            return out

    with Tracker() as tracker:
        fn()
    return tracker.peak
