"""Context parallelism: causal attention over a sequence split across ranks (ring attention).

Each of ``t`` ranks holds part of the sequence: its queries, keys and values. Attention needs every
query to see every earlier key, so the keys and values travel round a ring: at step ``i`` rank
``r`` holds the K/V of rank ``r - i`` and folds that block into its output with the online-softmax
update (a running log-sum-exp, as in FlashAttention). After ``t`` steps every rank has exactly the
output full attention gives its queries, and no rank ever held more than two blocks of K/V.

Which positions a rank holds is its *layout*. The sequence is cut into ``2t`` equal chunks:

- ``"contiguous"``: rank ``r`` holds chunks ``2r`` and ``2r + 1`` (one slice of the sequence);
- ``"zigzag"``: rank ``r`` holds chunks ``r`` and ``2t - 1 - r`` (one early, one late).

Under a causal mask a chunk attends only to chunks at or before it, so with the contiguous layout
the last rank does ``4t - 1`` chunk-pairs of work and the first only 3; the zig-zag gives every
rank ``2t + 1`` (:func:`work`). Shapes: q is (B, heads, T_local, head_dim), T_local = 2 x chunk
length, and k, v the same with as many heads or fewer (grouped-query attention: the K/V travel at
their own head count); the sequence dimension of a full tensor is ``dim``. A model with rotary
positions (``course_utils.llama``) rotates each rank's q and k by the true positions of its
tokens, :func:`positions`, before they enter the ring.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

LAYOUTS = ("contiguous", "zigzag")


def chunk_ids(layout: str, rank: int, world_size: int) -> list[int]:
    """The two chunks (of ``2 * world_size``) of the sequence that ``rank`` holds, in order."""
    if layout == "contiguous":
        return [2 * rank, 2 * rank + 1]
    if layout == "zigzag":
        return [rank, 2 * world_size - 1 - rank]
    raise ValueError(f"unknown layout {layout!r}; use one of {LAYOUTS}")


def shard(x: torch.Tensor, layout: str, rank: int, world_size: int, dim: int = 1) -> torch.Tensor:
    """This rank's part of a full-sequence tensor ``x``: its two chunks along ``dim``, concatenated."""
    if x.shape[dim] % (2 * world_size):
        raise ValueError(f"sequence length {x.shape[dim]} must be a multiple of 2 x world_size = "
                         f"{2 * world_size} (each rank holds two equal chunks); pad or shorten it")
    chunks = x.chunk(2 * world_size, dim=dim)
    return torch.cat([chunks[i] for i in chunk_ids(layout, rank, world_size)], dim=dim)


def unshard(parts: list[torch.Tensor], layout: str, dim: int = 1) -> torch.Tensor:
    """Put every rank's part (``parts[rank]``, as :func:`shard` cut it) back in sequence order."""
    world_size = len(parts)
    chunks: dict[int, torch.Tensor] = {}
    for rank, part in enumerate(parts):
        for cid, piece in zip(chunk_ids(layout, rank, world_size), part.chunk(2, dim=dim)):
            chunks[cid] = piece
    return torch.cat([chunks[i] for i in range(2 * world_size)], dim=dim)


def positions(seq_len: int, layout: str, rank: int, world_size: int) -> torch.Tensor:
    """Positions (int64, shape (seq_len / world_size,)) of the tokens ``rank`` holds."""
    return shard(torch.arange(seq_len), layout, rank, world_size, dim=0)


def pairs(mine: list[int], theirs: list[int]) -> list[tuple[int, int, bool]]:
    """The (query chunk, key chunk, diagonal?) pairs that need computing: key chunk <= query chunk,
    as indices 0/1 into ``mine`` and ``theirs``. Pairs with a later key chunk are masked entirely."""
    return [(a, b, qc == kc) for a, qc in enumerate(mine) for b, kc in enumerate(theirs) if kc <= qc]


def work(layout: str, rank: int, world_size: int) -> int:
    """Chunk pairs ``rank`` computes in one forward pass (its attention work, in blocks)."""
    mine = chunk_ids(layout, rank, world_size)
    return sum(len(pairs(mine, chunk_ids(layout, src, world_size))) for src in range(world_size))


def _accumulate(x: torch.Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)


def _grouped(q, k, v):
    """q (B, a, c, d) -> (B, g, a/g, c, d) and k, v (B, g, c', d) -> (B, g, 1, c', d): with
    grouped-query attention (g K/V heads, g dividing a) query head i reads K/V head i // (a/g); the
    K/V broadcast over their a/g query heads without being copied. g = a: multi-head attention."""
    g = k.shape[1]
    return q.unflatten(1, (g, q.shape[1] // g)), k.unsqueeze(2), v.unsqueeze(2)


def _attend(q, k, v, diagonal: bool):
    """Softmax attention of one block: output (B, H, c, hd) and log-sum-exp (B, H, c), both in
    float32 at least (16-bit inputs accumulate in float32, as fused kernels do). k and v may have
    fewer heads than q (grouped-query attention, :func:`_grouped`)."""
    q, k, v = _grouped(q, k, v)
    scores = (q @ k.transpose(-1, -2)).to(_accumulate(q)) * (q.shape[-1] ** -0.5)
    if diagonal:   # the same chunk: query i sees keys 0..i
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), -math.inf)
    lse = scores.logsumexp(-1)
    return ((scores - lse[..., None]).exp().to(v.dtype) @ v).flatten(1, 2), lse.flatten(1, 2)


def _attend_backward(q, k, v, lse, dout, delta, diagonal: bool):
    """Gradients of one block, given the *final* log-sum-exp of each query row and
    ``delta = rowsum(dout * out)``: FlashAttention's backward, one block at a time. dK and dV come
    out at k's and v's head count: each K/V head's gradient sums those of the query heads it serves."""
    scale = q.shape[-1] ** -0.5
    (q, k, v), g = _grouped(q, k, v), k.shape[1]
    lse, dout, delta = lse.unflatten(1, (g, -1)), dout.unflatten(1, (g, -1)), delta.unflatten(1, (g, -1))
    scores = (q @ k.transpose(-1, -2)).to(_accumulate(q)) * scale
    if diagonal:
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), -math.inf)
    p = (scores - lse[..., None]).exp()                       # this block's share of the softmax
    dv = (p.to(dout.dtype).transpose(-1, -2) @ dout).sum(2)
    ds = p * ((dout @ v.transpose(-1, -2)).to(p.dtype) - delta[..., None])
    dk = ((ds.to(q.dtype).transpose(-1, -2) @ q) * scale).sum(2)
    return ((ds.to(q.dtype) @ k) * scale).flatten(1, 2), dk, dv


def _rank_and_size(group) -> tuple[int, int]:
    """This rank and the ring's size; one process with no process group is a ring of one."""
    if group is None and not dist.is_initialized():
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def _shift(x: torch.Tensor, group) -> tuple[list, torch.Tensor]:
    """Start sending ``x`` to the next rank and receiving the previous rank's; returns the requests
    and the buffer the message lands in (valid after every request's ``wait()``)."""
    rank, world_size = _rank_and_size(group)
    if world_size == 1:
        return [], x   # the ring of one rank: the message is already home
    peer = lambda r: dist.get_global_rank(group, r % world_size) if group is not None else r % world_size  # noqa: E731
    incoming = torch.empty_like(x)
    ops = [dist.P2POp(dist.isend, x, peer(rank + 1), group), dist.P2POp(dist.irecv, incoming, peer(rank - 1), group)]
    return dist.batch_isend_irecv(ops), incoming


class RingAttention(torch.autograd.Function):
    """Causal attention of this rank's queries over the whole sequence, K/V passed round the ring.

    Forward saves only this rank's q, k, v, output and log-sum-exp; backward passes the K/V round
    the ring again, with their gradients travelling alongside until they arrive home."""

    @staticmethod
    def forward(ctx, q, k, v, layout: str, group):
        rank, world_size = _rank_and_size(group)
        mine, c = chunk_ids(layout, rank, world_size), q.shape[-2] // 2
        B, H, T, hd = q.shape   # running output, in the (B, T, heads, hd) layout fused kernels write
        out = q.new_zeros(B, T, H, hd, dtype=_accumulate(q)).transpose(1, 2)   # (heads merge: no copy)
        lse = q.new_full(q.shape[:-1], -math.inf, dtype=out.dtype)   # on q's device (a GPU rank's too)
        kv = torch.stack([k, v])
        for step in range(world_size):
            if step < world_size - 1:
                requests, incoming = _shift(kv, group)      # send on while computing (overlap)
            theirs = chunk_ids(layout, (rank - step) % world_size, world_size)
            for a, b, diagonal in pairs(mine, theirs):
                rows, cols = slice(a * c, (a + 1) * c), slice(b * c, (b + 1) * c)
                o, o_lse = _attend(q[..., rows, :], kv[0][..., cols, :], kv[1][..., cols, :], diagonal)
                new = torch.logaddexp(lse[..., rows], o_lse)    # online softmax: rescale both, add
                out[..., rows, :] = (out[..., rows, :] * (lse[..., rows] - new).exp()[..., None]
                                     + o * (o_lse - new).exp()[..., None])
                lse[..., rows] = new
            if step < world_size - 1:
                for request in requests:
                    request.wait()
                kv = incoming
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.layout, ctx.group = layout, group
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        group = ctx.group
        rank, world_size = _rank_and_size(group)
        mine, c = chunk_ids(ctx.layout, rank, world_size), q.shape[-2] // 2
        delta = (dout.to(lse.dtype) * out.to(lse.dtype)).sum(-1)
        dq = torch.zeros_like(q)
        travelling = torch.stack([k, v, torch.zeros_like(k), torch.zeros_like(v)])   # K, V, dK, dV
        for step in range(world_size):
            theirs = chunk_ids(ctx.layout, (rank - step) % world_size, world_size)
            kk, vv, dk, dv = travelling
            for a, b, diagonal in pairs(mine, theirs):
                rows, cols = slice(a * c, (a + 1) * c), slice(b * c, (b + 1) * c)
                g = _attend_backward(q[..., rows, :], kk[..., cols, :], vv[..., cols, :], lse[..., rows],
                                     dout[..., rows, :], delta[..., rows], diagonal)
                dq[..., rows, :] += g[0]
                dk[..., cols, :] += g[1]
                dv[..., cols, :] += g[2]
            last = step == world_size - 1
            requests, incoming = _shift(travelling[2:] if last else travelling, group)  # last: dK, dV go home
            for request in requests:
                request.wait()
            travelling = incoming
        return dq, travelling[0], travelling[1], None, None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str = "zigzag",
                   group=None) -> torch.Tensor:
    """Causal attention for this rank's part of the sequence (cut by :func:`shard` with ``layout``):
    q (B, a, T_local, head_dim), k and v (B, g, T_local, head_dim) -> output shaped like q, equal to
    this rank's part of ``scaled_dot_product_attention(Q, K, V, is_causal=True, enable_gqa=g != a)``
    on the full sequence. g = a: multi-head attention; g < a (g dividing a): grouped-query
    attention, the K/V travel round the ring at their g heads (messages g/a the size) and each
    query head reads K/V head i // (a/g) where they arrive. ``group``: the ring's ranks, the
    context-parallel group of the process grid
    (``course_utils.layout.make_mesh(grid)["cp"].get_group()``); None: every rank."""
    if q.shape[-2] % 2:
        raise ValueError(f"this rank holds {q.shape[-2]} positions; it must hold two equal chunks "
                         f"(cut the sequence with context_parallel.shard)")
    if k.shape != v.shape or k.shape[1] < 1 or q.shape[1] % k.shape[1]:
        raise ValueError(f"q has {q.shape[1]} heads and k, v shapes {tuple(k.shape)}, {tuple(v.shape)}: k and v "
                         f"must have the same shape and a number of heads dividing q's (grouped-query attention)")
    return RingAttention.apply(q, k, v, layout, group)
