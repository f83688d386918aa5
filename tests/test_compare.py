import numpy as np
import pytest

from course_utils.compare import max_abs_diff


def test_max_abs_diff_over_lists_of_arrays():
    a = [np.zeros((2, 3), np.float32), np.ones(4)]
    b = [np.full((2, 3), 0.25, np.float32), np.array([1.0, 1.0, 0.5, 1.0])]
    assert max_abs_diff(a, b) == 0.5
    assert max_abs_diff(a, a) == 0.0
    assert max_abs_diff([[1, 2]], [[1, 5]]) == 3.0      # anything np.asarray takes


@pytest.mark.parametrize("b", [[np.zeros((3, 2)), np.ones(4)], [np.zeros((2, 3))]])
def test_max_abs_diff_refuses_mismatched_lists(b):
    with pytest.raises(ValueError, match="do not match"):
        max_abs_diff([np.zeros((2, 3)), np.ones(4)], b)
