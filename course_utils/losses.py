"""The loss of a large vocabulary without its logits: cross-entropy computed chunk by chunk of
tokens, each chunk's logits recomputed in backward.

The output head turns N tokens' hidden states (N, h) into logits (N, V); with Llama 3's V = 128,256
that is 30 times the width of the hidden state of an 8B model. A plain
``F.cross_entropy(logits.float(), targets)`` keeps for backward the float32 log-probabilities
(N·V·4 bytes) besides the hidden states, and its backward makes their gradient, as large again.
:func:`chunked_cross_entropy` keeps only what it was given (hidden states, weight, targets) and
materialises the logits of ``chunk`` tokens at a time, in forward and again in backward: the
saved N·V·4 bytes are gone, for one more matmul of the head (2·N·h·V FLOPs). Megatron's and
torchtune's chunked losses, and Liger's fused linear cross-entropy, are variants of this trade.
(Vocabulary-parallel cross-entropy splits V over the tensor-parallel ranks instead: each keeps
N·V/t.)
"""
from __future__ import annotations

import torch
from torch.nn import functional as F


def cross_entropy_from_hidden(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The plain way: mean cross-entropy of ``hidden`` (N, h) through the head ``weight`` (V, h),
    ``targets`` (N,) int64, the logits (N, V) made whole and the softmax taken in float32."""
    return F.cross_entropy((hidden @ weight.T).float(), targets)


class _ChunkedCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy over N tokens, logits materialised ``chunk`` rows at a time; keeps
    hidden, weight and targets for backward, and recomputes each chunk's logits there."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int) -> torch.Tensor:
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, hidden.shape[0], chunk):
            logits = (hidden[start:start + chunk] @ weight.T).float()
            total += F.cross_entropy(logits, targets[start:start + chunk], reduction="sum")
        ctx.save_for_backward(hidden, weight, targets)
        ctx.chunk = chunk
        return total / hidden.shape[0]

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        hidden, weight, targets = ctx.saved_tensors
        n, chunk = hidden.shape[0], ctx.chunk
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        for start in range(0, n, chunk):
            rows = slice(start, start + chunk)
            # d(mean loss)/d logits = (softmax − one-hot) / N, computed in place on the chunk's probabilities
            probs = (hidden[rows] @ weight.T).float().softmax(-1)
            probs[torch.arange(probs.shape[0], device=probs.device), targets[rows]] -= 1
            g = (probs * (grad / n)).to(hidden.dtype)
            grad_hidden[rows] = g @ weight
            grad_weight += (g.T @ hidden[rows]).float()
        return grad_hidden, grad_weight.to(weight.dtype), None, None


def chunked_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                          chunk: int = 1024) -> torch.Tensor:
    """Mean cross-entropy of ``hidden`` (N, h) through the head ``weight`` (V, h) against
    ``targets`` (N,) int64, the same value and gradients as :func:`cross_entropy_from_hidden`
    (within float rounding), holding the logits of at most ``chunk`` tokens at a time (float32,
    chunk·V·4 bytes, and a copy in ``hidden``'s dtype). Keeps for backward only its inputs."""
    shapes_agree = hidden.shape[1:] == weight.shape[1:] and targets.shape == hidden.shape[:1]
    if hidden.dim() != 2 or weight.dim() != 2 or not shapes_agree:
        raise ValueError(f"hidden must be (N, h), weight (V, h) and targets (N,); got {tuple(hidden.shape)}, "
                         f"{tuple(weight.shape)}, {tuple(targets.shape)} (flatten batch and sequence first)")
    if not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive number of tokens, got {chunk!r}")
    if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= weight.shape[0]):
        raise ValueError(f"targets must be token ids in 0..{weight.shape[0] - 1}: this loss has no ignore_index "
                         f"(got ids from {int(targets.min())} to {int(targets.max())}); drop padded positions "
                         f"(e.g. -100) before calling it")
    return _ChunkedCrossEntropy.apply(hidden, weight, targets, chunk)
