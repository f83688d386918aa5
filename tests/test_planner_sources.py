"""Two planner constants are read from PyTorch's source, not measured here (the CPU cannot run them as
a GPU job does): pin the code they were read from, so that a PyTorch upgrade that changes it fails
here and says which constant to re-derive."""
import inspect

from course_utils import planner


def test_loss_parallel_backward_holds_three_gradients_beside_the_log_probabilities():
    """planner.LOSS_PARALLEL_GRADIENTS = 3: at the peak of loss_parallel's backward the kept
    log-probabilities x sit beside a zeroed gradient, grad_input + exp(x), and its product with the
    incoming gradient (exp(x) itself is freed after the sum)."""
    from torch.distributed.tensor.parallel import loss

    source = inspect.getsource(loss._nll_loss_and_log_softmax_backward)
    assert "grad_input = torch.zeros_like(x)" in source
    assert "return (grad_input + torch.exp(x)) * grad_output" in source, (
        "loss_parallel's backward changed: re-derive planner.LOSS_PARALLEL_GRADIENTS")
    assert planner.LOSS_PARALLEL_GRADIENTS == 3


def test_fsdp2_accumulates_unsharded_gradients_in_its_reduce_dtype():
    """planner.FSDP_ACCUMULATED_GRAD_BYTES = 4: with gradient sync off (a pipeline stage between
    microbatches), FSDP2 moves the unsharded gradient to its reduce dtype (float32 in mixed precision)."""
    from torch.distributed.fsdp._fully_shard._fsdp_param import FSDPParam

    source = inspect.getsource(FSDPParam.to_accumulated_grad_if_needed)
    assert "self.unsharded_accumulated_grad = unsharded_grad.to(self.reduce_dtype)" in source, (
        "FSDP2's gradient accumulation changed: re-derive planner.FSDP_ACCUMULATED_GRAD_BYTES")
    from torch.distributed.pipelining import stage

    assert "set_requires_gradient_sync(False)" in inspect.getsource(stage)
    assert planner.FSDP_ACCUMULATED_GRAD_BYTES == 4
