"""Issue 38, chapter 07: what MXNet's GPU facts decide (faked facts; no MXNet, no GPU needed).

Facts: whether the MXNet build has CUDA (``mx.runtime.Features().is_enabled("CUDA")``) and how many
GPUs it sees (``mx.context.num_gpus()``). A CPU build sees none.
"""
import pytest

from course_utils import mxcluster

GPU_COUNTS = (0, 1, 2, 8)


@pytest.mark.parametrize("n_gpus", GPU_COUNTS)
def test_contexts_are_never_one_against_one(n_gpus):
    """Chapter 07 compares 1 context with N_CONTEXTS: the N must be N_CONTEXTS on every machine
    (before: GPUs only, so 1 context against 1 context on a one-GPU CUDA build)."""
    contexts = mxcluster.data_parallel_contexts(2, n_gpus)
    assert len(contexts) == 2
    assert contexts == ([("gpu", 0), ("gpu", 1)] if n_gpus >= 2 else [("cpu", 0), ("cpu", 1)])
    assert mxcluster.data_parallel_contexts(4, n_gpus) == (
        [("gpu", i) for i in range(4)] if n_gpus >= 4 else [("cpu", i) for i in range(4)])


def test_contexts_refuse_fewer_than_two():
    with pytest.raises(ValueError, match="n must be an integer >= 2"):
        mxcluster.data_parallel_contexts(1, 8)


@pytest.mark.parametrize("n_gpus", GPU_COUNTS)
@pytest.mark.parametrize("cuda_build", [False, True])
def test_what_putting_a_model_on_the_gpu_does(cuda_build, n_gpus):
    """A CPU build refuses with 'GPU is not enabled' (whatever the machine has); a CUDA build runs
    where it sees a GPU and fails (with the CUDA runtime's message) where it sees none."""
    seen = n_gpus if cuda_build else 0          # a CPU build's num_gpus() is 0
    expected = mxcluster.gpu_try(cuda_build, seen)
    if not cuda_build:
        assert not expected.runs and expected.last_line == "MXNetError: GPU is not enabled"
    elif n_gpus == 0:
        assert not expected.runs and expected.last_line is None
    else:
        assert expected.runs and expected.last_line is None
    assert expected.matches(0, "done") is expected.runs
    assert expected.matches(1, "MXNetError: GPU is not enabled") is (not expected.runs)
    assert expected.matches(1, "CUDA: no CUDA-capable device is detected") is (cuda_build and n_gpus == 0)


def test_gpu_try_rejects_impossible_facts():
    with pytest.raises(ValueError, match="a CPU build"):
        mxcluster.gpu_try(False, 1)
