"""course_utils.commcount: the collectives DTensor issues, and the bytes the ring algorithm sends."""
import pytest
import workers

from course_utils import launch
from course_utils.commcount import ring_bytes_sent
from course_utils.placement import cpu_plan  # the workers here use CPU tensors


def test_ring_bytes_per_collective():
    assert ring_bytes_sent("all_reduce", 400, 4) == 600          # 2 (t-1)/t n
    assert ring_bytes_sent("all_gather", 100, 4) == 300          # (t-1) n, n = this rank's input
    assert ring_bytes_sent("reduce_scatter", 400, 4) == 300      # (t-1)/t n
    assert ring_bytes_sent("all_to_all", 400, 4) == 300
    assert ring_bytes_sent("all_reduce", 400, 1) == 0            # one rank sends nothing
    # an all-reduce is a reduce-scatter followed by an all-gather of the scattered piece
    assert ring_bytes_sent("all_reduce", 400, 4) == (ring_bytes_sent("reduce_scatter", 400, 4)
                                                     + ring_bytes_sent("all_gather", 100, 4))
    with pytest.raises(ValueError, match="unknown collective 'broadcast'"):
        ring_bytes_sent("broadcast", 1, 2)


def test_collectives_records_what_dtensor_and_an_uneven_all_to_all_issue():
    ((calls, counts, sent, summed, shape, got, empty), (calls1, *_, got1, empty1)) = launch.run(
        workers.collectives_seen, 2, plan=cpu_plan(2), output="none")
    assert calls == [("all_reduce", 128, 2, 128, (0, 1)), ("all_gather", 64, 2, 64, (0, 1)),
                     ("all_to_all", 128, 2, 96, (0, 1)), ("all_gather", 24, 2, 24, (0, 1)),
                     ("reduce_scatter", 48, 2, 24, (0, 1)), ("all_reduce", 12, 2, 12, (0, 1))]
    assert calls1[2] == ("all_to_all", 128, 2, 64, (0, 1))      # rank 1 keeps 2 of its 4 rows
    assert counts == {"all_reduce": 2, "all_gather": 2, "all_to_all": 1, "reduce_scatter": 1}
    assert sent == 128 + 64 + 96 + 24 + 24 + 12
    assert summed == 2.0 and shape == (4, 8)
    assert got == [0, 1, 1] and got1 == [0, 0, 0, 1, 1]
    assert empty == [("all_to_all", 0, 2, 0.0, (0, 1))]                  # sends nothing: no division by 0
    assert empty1 == [("all_to_all", 64, 2, 32.0, (0, 1))]               # keeps 1 of its 2 rows
