"""The process grid: how many ranks each parallelism gets, and which ranks talk to which.

One :class:`Layout` names every dimension — data (``dp``), tensor (``tp``), pipeline (``pp``),
context (``cp``) and expert (``ep``) parallelism, and HSDP's ``replicate`` — and everything that
follows from them: ``world_size``, a rank's coordinates (:meth:`Layout.coords`), the ranks of each
group (:meth:`Layout.groups`) and, once a job runs, the ``DeviceMesh`` (:func:`make_mesh`,
:func:`expert_mesh`). ``course_utils.composed`` trains on it; ``course_utils.planner`` predicts it.

Ranks are numbered tensor parallel fastest, then context, data and pipeline parallel (Megatron-LM's
order): ``rank = ((p · dp + d) · cp + c) · tp + t``. Tensor parallelism talks in every layer, so
its ranks are consecutive (one node, NVLink); pipeline parallelism talks least, so it goes outermost.

``world_size = pp · dp · cp · tp``. Expert parallelism adds no ranks: its groups are carved out of
the ``dp · cp`` ranks that hold the same dense weights (position ``d · cp + c`` of a pp and tp
coordinate), ``ep`` consecutive positions to a group; each group's ranks hold different experts,
and the ``dp · cp / ep`` groups (``"edp"``, expert data parallel) replicate them. With HSDP
(``replicate`` > 1) the ``dp`` ranks are a ``replicate × dp / replicate`` grid: parameters
sharded inside a row, replicated across rows.

This module imports no torch until :func:`make_mesh` runs.
"""
from __future__ import annotations

from dataclasses import dataclass

AXES = ("pp", "dp", "cp", "tp")
"""The mesh dimensions, outermost first; :meth:`Layout.coords` also gives ``"ep"``."""


@dataclass(frozen=True, kw_only=True)   # Layout(dp=2, tp=2): a positional Layout(2, 2) would be ambiguous
class Layout:
    """How many ranks each parallelism gets (all default to 1). ``ep`` must divide ``dp · cp``;
    ``replicate`` (HSDP) must divide ``dp``."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    replicate: int = 1

    def __post_init__(self):
        for name in ("dp", "tp", "pp", "cp", "ep", "replicate"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.dp % self.replicate:
            raise ValueError(f"replicate={self.replicate} must divide dp={self.dp} (HSDP: dp ranks in "
                             f"replicate groups of equal size)")
        if (self.dp * self.cp) % self.ep:
            raise ValueError(f"ep={self.ep} must divide dp·cp={self.dp * self.cp}: expert-parallel groups are "
                             f"carved out of the ranks holding the same dense weights")

    @property
    def world_size(self) -> int:
        """Ranks in the job: ``pp · dp · cp · tp`` (ep and replicate add none)."""
        return self.pp * self.dp * self.cp * self.tp

    def coords(self, rank: int) -> dict[str, int]:
        """``{"pp", "dp", "cp", "tp", "ep"}`` coordinates of ``rank``: tensor parallel varies fastest;
        ``ep`` is the rank's place in its expert-parallel group."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside a layout of {self.world_size} ranks")
        t, c = rank % self.tp, rank // self.tp % self.cp
        d, p = rank // (self.tp * self.cp) % self.dp, rank // (self.tp * self.cp * self.dp)
        return {"pp": p, "dp": d, "cp": c, "tp": t, "ep": (d * self.cp + c) % self.ep}

    def rank(self, pp: int = 0, dp: int = 0, cp: int = 0, tp: int = 0) -> int:
        """The rank at these coordinates (the inverse of :meth:`coords`)."""
        return ((pp * self.dp + dp) * self.cp + cp) * self.tp + tp

    def groups(self, dim: str) -> list[list[int]]:
        """The ranks of every group of dimension ``dim`` ("pp", "dp", "cp", "tp", "ep" or "edp"):
        ranks whose other coordinates agree, ascending. The groups ``make_mesh(...)[dim]`` holds."""
        if dim not in AXES + ("ep", "edp"):
            raise ValueError(f"unknown dimension {dim!r}; pick one of {', '.join(AXES + ('ep', 'edp'))}")

        def key(rank: int) -> tuple:
            c = self.coords(rank)
            if dim in ("ep", "edp"):   # dp·cp position: ep consecutive ones to a group, edp strided
                slot = (c["dp"] * self.cp + c["cp"]) // self.ep if dim == "ep" else c["ep"]
                return c["pp"], c["tp"], slot
            return tuple(c[a] for a in AXES if a != dim)

        out: dict[tuple, list[int]] = {}
        for rank in range(self.world_size):
            out.setdefault(key(rank), []).append(rank)
        return list(out.values())

    def __str__(self) -> str:
        hsdp = f" (HSDP {self.replicate}×{self.dp // self.replicate})" if self.replicate > 1 else ""
        cp = f" × cp={self.cp}" if self.cp > 1 else ""
        ep = f" (ep={self.ep} within dp·cp)" if self.ep > 1 else ""
        return f"pp={self.pp} × dp={self.dp}{hsdp}{cp} × tp={self.tp}{ep} = {self.world_size} ranks"


def make_mesh(layout: Layout, device_type: str = "cpu"):
    """The ``DeviceMesh`` of ``layout`` over this job's ranks (the process group must exist and have
    exactly ``layout.world_size`` ranks). Dimensions ``("pp", "dp", "cp", "tp")``, size-1 ones
    included, so ``mesh["tp"]`` exists on every layout; with HSDP ``("pp", "replicate", "shard",
    "cp", "tp")``, the data-parallel ranks as a grid of their own. ``mesh[dim].get_group()`` is this
    rank's process group of ``dim``; expert parallelism has its own mesh (:func:`expert_mesh`)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if dist.get_world_size() != layout.world_size:
        raise ValueError(f"{layout} needs {layout.world_size} processes, this job has {dist.get_world_size()}")
    if layout.replicate == 1:
        return init_device_mesh(device_type, (layout.pp, layout.dp, layout.cp, layout.tp), mesh_dim_names=AXES)
    shape = (layout.pp, layout.replicate, layout.dp // layout.replicate, layout.cp, layout.tp)
    return init_device_mesh(device_type, shape, mesh_dim_names=("pp", "replicate", "shard", "cp", "tp"))


def expert_mesh(layout: Layout, device_type: str = "cpu"):
    """The ``DeviceMesh`` the experts live on: dimensions ``("pp", "edp", "ep", "tp")``, the dp·cp
    ranks cut into ``dp·cp/ep`` expert-data-parallel rows of ``ep``. ``mesh["ep"].get_group()`` is
    the group ``expert_parallel`` dispatches tokens over (its groups are :meth:`Layout.groups`'s)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if dist.get_world_size() != layout.world_size:
        raise ValueError(f"{layout} needs {layout.world_size} processes, this job has {dist.get_world_size()}")
    shape = (layout.pp, layout.dp * layout.cp // layout.ep, layout.ep, layout.tp)
    return init_device_mesh(device_type, shape, mesh_dim_names=("pp", "edp", "ep", "tp"))
