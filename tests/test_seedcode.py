import pytest

from course_utils.seedcode import expect_error


def test_shows_the_expected_error_and_the_line(capsys):
    with expect_error(KeyError):
        {}["missing"]
    out = capsys.readouterr().out
    assert out.startswith("KeyError: 'missing'") and 'raised by: {}["missing"]' in out


def test_fails_when_no_error_happens():
    with pytest.raises(AssertionError, match="expected the code to raise KeyError"):
        with expect_error(KeyError):
            pass


def test_other_errors_pass_through_and_types_are_required():
    with pytest.raises(ValueError):
        with expect_error(KeyError):
            raise ValueError("not the expected one")
    with pytest.raises(ValueError, match="name the exception"):
        with expect_error():
            pass
