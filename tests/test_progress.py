"""Progress bars: labelled, advancing as processes finish, silent when not asked for."""
import pytest
import workers

from course_utils import launch, progress, scripts


def test_bar_needs_a_label():
    with pytest.raises(ValueError, match="desc"):
        progress.bar(range(3), desc="")


def test_bar_counts_a_loop(capsys):
    assert list(progress.bar(range(5), desc="sizes")) == list(range(5))
    err = capsys.readouterr().err  # outside Jupyter: tqdm's text bar on stderr
    assert "sizes: 100%" in err and "5/5" in err


def test_run_commands_shows_finished_commands(capsys):
    scripts.run_commands([["true"], ["sleep", "0.6"]], progress="two commands")
    err = capsys.readouterr().err
    assert "two commands" in err and "2/2" in err


def test_launch_run_shows_finished_ranks(capsys):
    out = launch.run(workers.rank_and_sum, 2, output="none", progress="ranks")
    assert [r["rank"] for r in out] == [0, 1]
    err = capsys.readouterr().err
    assert "ranks: 100%" in err and "2/2" in err


def test_no_label_no_bar(capsys):
    scripts.run_commands([["true"]])
    assert capsys.readouterr().err == ""


def test_run_command_with_a_label_shows_a_bar_and_still_checks(capsys):
    assert scripts.run_command(["echo", "hi"], progress="one command").stdout == "hi\n"
    assert "one command" in capsys.readouterr().err
    with pytest.raises(scripts.CommandError):
        scripts.run_command(["false"], progress="fails")
