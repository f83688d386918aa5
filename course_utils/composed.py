"""DP × TP × PP composed on one device mesh: the course's GPT (``course_utils.gpt``) on a grid of ranks.

The grid is ``course_utils.layout``'s (``Layout``, ``make_mesh`` and ``AXES`` are importable from
here too): a :class:`Layout` names how many ranks each parallelism gets; :func:`make_mesh` lays the
``world_size = pp · dp · tp`` ranks out as a ``DeviceMesh`` with the dimensions
``("pp", "dp", "cp", "tp")`` (cp of size 1 here: this module trains dp × tp × pp) — tensor parallel
innermost, because its collectives are the most frequent (inside a node, on NVLink), pipeline
outermost (one send per microbatch, across nodes). With HSDP the data-parallel ranks are a 2-D
``("replicate", "shard")`` grid of their own.

Building a rank's part of the model is three steps, each a function here:

1. :func:`pipeline_stage` keeps the blocks of this rank's pipeline stage (:class:`GPTStage`), with
   the embeddings on the first stage and the head on the last; parameter names stay those of the
   whole model (``blocks.5.mlp.fc.weight`` on every layout), so states compare and checkpoint by name;
2. ``tensor_parallel.parallelize_gpt`` splits each block's heads and MLP over the ``tp`` ranks;
3. :func:`shard_data_parallel` shards what is left over the ``dp`` ranks with FSDP2 (``fully_shard``):
   one unit per block, then the stage. Under the zero-bubble schedules and DualPipeV per-block units
   give silently wrong gradients (measured, torch 2.13): :func:`shard_data_parallel` refuses that
   combination, and ``per_block=False`` (one unit per stage, kept unsharded from forward to backward)
   is right.

Ranks are numbered ``rank = (p · dp + d) · tp + t`` (``Layout.coords``). Each data-parallel rank
reads its own slice of the global batch (:func:`batch_slice`); all tensor-parallel ranks of one slice read the same one.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .gpt import GPT, blocks_of
from .layout import AXES, Layout, make_mesh  # noqa: F401  (the grid, for this module's callers too)

# torch.distributed.pipelining's schedules: one stage per rank, several in a loop, or two in a V
ONE_STAGE = ("ScheduleGPipe", "Schedule1F1B")
LOOPED = ("ScheduleInterleaved1F1B", "ScheduleLoopedBFS", "ScheduleInterleavedZeroBubble")
V_SHAPED = ("ScheduleZBVZeroBubble", "ScheduleDualPipeV")
SCHEDULES = ONE_STAGE + LOOPED + V_SHAPED
# the schedules that split each backward into an input-gradient and a later weight-gradient pass
SPLIT_BACKWARD = ("ScheduleInterleavedZeroBubble", "ScheduleZBVZeroBubble", "ScheduleDualPipeV")


def data_parallel_mesh(mesh):
    """The mesh FSDP2 shards over: ``mesh["dp"]``, or the 2-D ``("replicate", "shard")`` for HSDP."""
    return mesh["replicate", "shard"] if "replicate" in mesh.mesh_dim_names else mesh["dp"]


def stage_layers(n_layer: int, n_stages: int) -> list[range]:
    """The blocks of each pipeline stage: ``n_layer / n_stages`` consecutive blocks each."""
    if n_stages < 1 or n_layer % n_stages:
        raise ValueError(f"n_layer={n_layer} blocks do not split into {n_stages} equal pipeline stages; "
                         f"pick a number of stages that divides {n_layer}")
    per = n_layer // n_stages
    return [range(s * per, (s + 1) * per) for s in range(n_stages)]


class GPTStage(nn.Module):
    """Some consecutive blocks of a GPT (or of a ``course_utils.llama.Llama``), with the embeddings if
    they start the model and the final norm and head if they end it. Blocks sit in a ``ModuleDict``
    keyed by their index in the whole model, so every parameter keeps its name
    (``blocks.3.attn.q.weight``). A Llama stage has no position table: each of its blocks gets the
    tokens' positions (0..T-1; a stage holds whole sequences) and rotates q and k by them.

    forward: the first stage takes token ids (B, T) int64, the others activations (B, T, d_model);
    the last stage returns logits (B, T, vocab_size), the others activations (B, T, d_model).
    """

    def __init__(self, model: nn.Module, layers: range):
        super().__init__()
        self.config = model.config
        self.rope = model.config.positions == "rope"
        self.is_first, self.is_last = layers.start == 0, layers.stop == model.config.n_layer
        if self.is_first:
            self.tok_emb = model.tok_emb
            if not self.rope:
                self.pos_emb = model.pos_emb
        self.blocks = nn.ModuleDict({str(i): model.blocks[i] for i in layers})
        if self.is_last:
            self.ln_f, self.head = model.ln_f, model.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[1], device=x.device)
        if self.is_first:
            x = self.tok_emb(x) if self.rope else self.tok_emb(x) + self.pos_emb(positions)
        for block in self.blocks.values():
            x = block(x, positions) if self.rope else block(x)
        return self.head(self.ln_f(x)) if self.is_last else x


def pipeline_stage(model: nn.Module, stage: int, n_stages: int) -> GPTStage:
    """Stage ``stage`` of ``n_stages`` of ``model`` (a GPT or a Llama, which keeps its weights; the rest
    is dropped)."""
    return GPTStage(model, stage_layers(model.config.n_layer, n_stages)[stage])


def shard_data_parallel(stage: nn.Module, dp_mesh, *, per_block: bool = True, schedule: str | None = None,
                        mp_policy=None) -> nn.Module:
    """FSDP2 over ``dp_mesh``: one ``fully_shard`` unit per block (``per_block``), then the stage.

    ``schedule``: the pipeline schedule's class name, if any. The zero-bubble schedules and
    DualPipeV split each backward into an input-gradient pass and a later weight-gradient pass; with
    a unit per block the weight gradients come out wrong without an error (torch 2.13; the GPT of
    ``tests/test_composed.py`` is 0.05–0.11 off one process after two steps) — refused here. With
    ``per_block=False`` the stage is one unit that stays unsharded from forward to backward.
    """
    from torch.distributed.fsdp import fully_shard

    if schedule in SPLIT_BACKWARD and per_block:
        raise ValueError(f"{schedule} with one FSDP unit per block gives wrong gradients without an error "
                         f"(torch 2.13); use shard_data_parallel(..., per_block=False)")
    kwargs = {"mesh": dp_mesh} | ({"mp_policy": mp_policy} if mp_policy is not None else {})
    if per_block:
        for block in blocks_of(stage):
            fully_shard(block, **kwargs)
    fully_shard(stage, reshard_after_forward=per_block, **kwargs)
    return stage


def batch_slice(batch: torch.Tensor, dp_rank: int, dp: int) -> torch.Tensor:
    """Data-parallel rank ``dp_rank``'s rows of the global ``batch`` (B, ...): B must divide by ``dp``."""
    if batch.shape[0] % dp:
        raise ValueError(f"a global batch of {batch.shape[0]} sequences does not split over dp={dp} ranks")
    per = batch.shape[0] // dp
    return batch[dp_rank * per:(dp_rank + 1) * per]


def stage_ids(schedule: str, pp_rank: int, pp: int) -> list[int]:
    """The pipeline stages pipeline rank ``pp_rank`` holds under ``schedule``: one (GPipe, 1F1B), two
    in a loop (rank r: r and r + pp) or two in a V (rank r: r and 2·pp − 1 − r, so that rank 0
    holds the first and the last stage)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; pick one of {', '.join(SCHEDULES)}")
    if schedule in ONE_STAGE:
        return [pp_rank]
    return [pp_rank, 2 * pp - 1 - pp_rank] if schedule in V_SHAPED else [pp_rank, pp_rank + pp]


def make_schedule(schedule: str, stages: list, n_microbatches: int, loss_fn):
    """``torch.distributed.pipelining``'s ``schedule`` over this rank's ``PipelineStage``s.

    Refuses, with the layout and the reason, too few microbatches for the schedule: 1F1B and the
    looped schedules need one per pipeline rank, DualPipeV one per stage. With fewer, older PyTorch
    waited forever (torchtitan#775); torch 2.13 refuses 1F1B and DualPipeV itself, this check covers
    every schedule the same way, before a stage is built."""
    import torch.distributed as dist
    import torch.distributed.pipelining as pipelining
    from torch.torch_version import TorchVersion

    stage_ids(schedule, 0, 1)   # a known name
    n_ranks = stages[0].group_size
    n_stages = stages[0].num_stages
    need = n_stages if schedule == "ScheduleDualPipeV" else (1 if schedule == "ScheduleGPipe" else n_ranks)
    if n_microbatches < need:
        raise ValueError(f"{schedule} on {n_ranks} pipeline ranks ({n_stages} stages) needs at least {need} "
                         f"microbatches, got {n_microbatches}: with fewer a rank waits for a microbatch that "
                         f"never comes")
    old_torch = TorchVersion(torch.__version__) < (2, 12)
    if schedule in V_SHAPED and old_torch and dist.get_backend(stages[0].group) == "gloo":
        raise RuntimeError(f"{schedule} over gloo needs a torch newer than {torch.__version__}: up to 2.11 the "
                           "pipeline's warm-up sends a tensor from the middle stage to the next one on the same "
                           "rank, which gloo cannot do ('Pair is not connected'); use the course's torch 2.13 "
                           "or NCCL (one GPU per rank)")
    cls = getattr(pipelining, schedule)
    return cls(stages[0] if schedule in ONE_STAGE else stages, n_microbatches=n_microbatches, loss_fn=loss_fn)


def pipeline_step(schedule, stages: list, inputs: torch.Tensor, targets: torch.Tensor) -> list[torch.Tensor]:
    """One forward and backward of the whole pipeline: the first stage's rank feeds ``inputs``, the
    last stage's rank ``targets``. Returns the last stage's per-microbatch losses (empty elsewhere)."""
    first, last = any(s.is_first for s in stages), any(s.is_last for s in stages)
    losses: list[torch.Tensor] = []
    args = (inputs,) if first else ()
    kwargs = {"target": targets, "losses": losses} if last else {}
    schedule.step(*args, **kwargs)
    return losses


@dataclass
class RankModel:
    """What one rank trains: its ``parts`` (the whole model, or its pipeline stages), with
    tensor-parallel and FSDP2 layers in them, and the pipeline ``schedule`` over its ``stages``
    (None without pipeline parallelism)."""

    parts: list[nn.Module]
    schedule: object | None = None
    stages: list = None

    def parameters(self) -> list[nn.Parameter]:
        return [p for part in self.parts for p in part.parameters()]

    def named_parameters(self) -> dict[str, nn.Parameter]:
        """Parameters by their name in the whole model (DTensors where sharded)."""
        return {name: p for part in self.parts for name, p in part.named_parameters()}

    def forward_backward(self, inputs: torch.Tensor, targets: torch.Tensor, loss_fn) -> torch.Tensor | None:
        """Forward and backward on this data-parallel rank's ``inputs`` and ``targets``; the mean
        loss, or None on a rank that holds no last stage."""
        if self.schedule is None:
            loss = loss_fn(self.parts[0](inputs), targets)
            loss.backward()
            return loss.detach()
        losses = pipeline_step(self.schedule, self.stages, inputs, targets)
        return torch.stack(losses).mean().detach() if losses else None


def parallelize(model: GPT, layout: Layout, mesh, rank: int, *, schedule: str | None = None,
                n_microbatches: int = 1, loss_fn=None, per_block: bool = True, sequence_parallel: bool = False,
                device: torch.device | str = "cpu") -> RankModel:
    """This rank's part of ``model`` on ``layout``: its pipeline stage(s) (``schedule`` names one of
    :data:`SCHEDULES`; needed when ``layout.pp`` > 1), each split over the ``tp`` ranks and sharded over
    the ``dp`` ranks, in that order (FSDP2 shards what tensor parallelism left on the rank)."""
    from torch.distributed.pipelining import PipelineStage

    from .tensor_parallel import parallelize_gpt

    if layout.cp > 1 or layout.ep > 1:
        raise ValueError(f"{layout}: composed.parallelize trains dp × tp × pp; context and expert parallelism "
                         f"are chapters 14 and 15's (course_utils.context_parallel, course_utils.expert_parallel)")
    if layout.pp > 1 and schedule is None:
        raise ValueError(f"pp={layout.pp} needs a pipeline schedule: schedule= one of {', '.join(SCHEDULES)}")
    pp_rank = layout.coords(rank)["pp"]
    ids = stage_ids(schedule, pp_rank, layout.pp) if schedule else [0]
    n_stages = layout.pp * len(ids)
    parts = [pipeline_stage(model, i, n_stages) for i in ids] if schedule else [model]
    for part in parts:
        if layout.tp > 1:
            parallelize_gpt(part, mesh["tp"], sequence_parallel)
        if layout.dp > 1:
            shard_data_parallel(part, data_parallel_mesh(mesh), per_block=per_block, schedule=schedule)
    if schedule is None:
        return RankModel(parts)
    stages = [PipelineStage(part, i, n_stages, torch.device(device), group=mesh["pp"].get_group())
              for part, i in zip(parts, ids)]
    return RankModel(parts, make_schedule(schedule, stages, n_microbatches, loss_fn), stages)


def by_dimension(calls: list, mesh) -> dict[str, list]:
    """``commcount`` calls grouped by the mesh dimension they ran on (``"dp"``, ``"tp"``, ...)."""
    groups = {tuple(mesh[name].mesh.flatten().tolist()): name for name in mesh.mesh_dim_names
              if mesh[name].size() > 1}   # a group of one rank never talks (and all such look alike)
    out: dict[str, list] = {}
    for call in calls:
        out.setdefault(groups.get(tuple(call.group), "other"), []).append(call)
    return out
