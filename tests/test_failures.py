import warnings

import pytest

from course_utils.failures import expect_error, expect_warning


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


def test_expect_warning_prints_every_warning_and_checks_the_category(capsys):
    with expect_warning(FutureWarning) as caught:
        warnings.warn("old API, use the new one", FutureWarning, stacklevel=1)
        warnings.warn("and something else", UserWarning, stacklevel=1)
    assert [w.category for w in caught] == [FutureWarning, UserWarning]
    assert capsys.readouterr().out == "FutureWarning: old API, use the new one\nUserWarning: and something else\n"


def test_expect_warning_fails_without_the_expected_category():
    with pytest.raises(AssertionError, match="warn with FutureWarning, but it warned with \\['UserWarning'\\]"):
        with expect_warning(FutureWarning):
            warnings.warn("not deprecated", UserWarning, stacklevel=1)
    with pytest.raises(AssertionError, match="but it warned with nothing"):
        with expect_warning(DeprecationWarning):
            pass
    with pytest.raises(ValueError, match="name the warning category"):
        with expect_warning():
            pass


def test_expect_error_prints_no_machine_path(tmp_path, monkeypatch, capsys):
    """A stored error must read the same on every machine: no site-packages prefix, files relative."""
    monkeypatch.chdir(tmp_path)
    import_error = ImportError("cannot import name 'x' from 'keras.utils' (/opt/v/lib/python3.11/site-packages/k/u.py)")
    with expect_error(ImportError):
        raise import_error
    with expect_error(FileNotFoundError):
        raise FileNotFoundError(f'File "{tmp_path}/work/ch00_broken.py", line 3')
    out = capsys.readouterr().out
    assert "(site-packages/k/u.py)" in out and 'File "work/ch00_broken.py"' in out
    assert "/opt/v" not in out and str(tmp_path) not in out
