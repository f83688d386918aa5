"""course_utils.tensor_parallel: the plans' shape, and a clear error for heads that do not split.
(The plans' equality with one process is asserted in chapters 09 and 14 on gloo ranks.)"""
from types import SimpleNamespace

import pytest
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

from course_utils.gpt import GPT, GPTConfig
from course_utils.tensor_parallel import block_plan, parallelize_gpt


def test_megatron_plan_splits_heads_and_mlp_columns_then_rows():
    plan = block_plan()
    assert all(isinstance(plan[k], ColwiseParallel) for k in ("attn.q", "attn.k", "attn.v", "mlp.fc"))
    assert all(isinstance(plan[k], RowwiseParallel) for k in ("attn.proj", "mlp.proj"))
    assert "ln_1" not in plan                                   # LayerNorms replicated
    sp = block_plan(sequence_parallel=True)
    assert isinstance(sp["ln_1"], SequenceParallel) and isinstance(sp["ln_2"], SequenceParallel)
    assert set(sp) >= set(plan) - {"attn"} | {"mlp"}


def test_heads_that_do_not_split_say_so():
    model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=4, d_model=16))
    with pytest.raises(ValueError, match="n_head=4 heads do not split over 3 ranks"):
        parallelize_gpt(model, SimpleNamespace(size=lambda: 3))
