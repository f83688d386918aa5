"""The exercise graders accept no wrong answer we know of, and their hidden tests are not the public ones.

Every question of every exercise notebook has a table of at least five planted wrong answers
(``MUTANTS`` in the chapter's module of ``grading/``); each must get 0 points with its specific hint,
and the solution must pass, run the way otter's autograder runs the notebook (``tools/mutants.py``).
The questions are spread over the xdist workers one by one (``tests/conftest.py``), not by file.
"""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import mutants  # noqa: E402

EXERCISES = {path.stem[:2]: mutants.read(path) for path in sorted(mutants.EXERCISES.glob("[0-9]*.ipynb"))}
QUESTIONS = [(chapter, name) for chapter, exercise in EXERCISES.items() for name in exercise.questions]
MIN_MUTANTS = 5


def test_every_question_is_all_or_nothing():
    """A wrong answer that fails one test case must score 0, not a share of the points."""
    partial = [f"{c} {q}" for c, q in QUESTIONS if not EXERCISES[c].questions[q].all_or_nothing]
    assert not partial, f"these questions give partial credit (add `all_or_nothing: true`): {partial}"


@pytest.mark.parametrize("chapter, question", QUESTIONS)
def test_hidden_tests_differ_from_the_public_ones(chapter, question):
    tests = EXERCISES[chapter].questions[question].tests
    public = {t.body for t in tests if not t.hidden}
    hidden = [t.body for t in tests if t.hidden]
    assert public and hidden, f"{chapter} {question} needs a public and a hidden test case"
    for body in hidden:
        assert body not in public, f"{chapter} {question}: a hidden test repeats a public one:\n{body}"


@pytest.mark.parametrize("chapter, question", QUESTIONS)
def test_every_question_has_a_table_of_planted_wrong_answers(chapter, question):
    exercise = EXERCISES[chapter]
    table = mutants.mutant_table(chapter)
    assert set(table) <= set(exercise.questions), \
        f"{mutants.grader_module(chapter)}.MUTANTS names questions that do not exist"
    planted = table.get(question, ())
    assert len(planted) >= MIN_MUTANTS, f"{chapter} {question} has {len(planted)} mutants, needs {MIN_MUTANTS}"
    assert len({m.name for m in planted}) == len(planted), "two mutants share a name"
    sources = [mutants.planted(exercise, question, m) for m in planted]
    assert exercise.questions[question].solution not in sources, "a mutant is the solution itself"
    assert len(set(sources)) == len(sources), "two mutants are the same code"


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    return mutants.Runner(tmp_path_factory.mktemp("mutants"))


@pytest.mark.filterwarnings("ignore::UserWarning:keras")   # what Keras tells the planted wrong answers
@pytest.mark.parametrize("chapter, question", QUESTIONS)
def test_every_planted_wrong_answer_scores_zero_with_its_hint(runner, chapter, question):
    exercise = EXERCISES[chapter]
    start = runner.prepare(exercise, question)
    solution = runner.attempt(exercise, question, exercise.questions[question].solution, start)
    assert solution.passed, f"the solution of {chapter} {question} fails: {solution.messages()}"
    accepted = {}
    for mutant in mutants.mutant_table(chapter).get(question, ()):
        outcome = runner.attempt(exercise, question, mutants.planted(exercise, question, mutant), start,
                                 until=mutant.hint)
        why = mutants.verdict(outcome, mutant.hint)
        if why:
            accepted[mutant.name] = why
    assert not accepted, "\n".join(f"{name}: {why}" for name, why in accepted.items())


def test_the_verdict_refuses_an_accepted_answer_a_crash_and_feedback_without_the_hint():
    test = mutants.TestCell("check(False, 'x')", hidden=False)
    assert "accepts this wrong answer" in mutants.verdict(mutants.Outcome([], [None, None]), "x")
    crashed = mutants.Outcome([], [(test, "RuntimeError", "shape mismatch")])
    assert "not with feedback" in mutants.verdict(crashed, "shape")
    vague = mutants.Outcome([], [(test, "AssertionError", "`y` is off")])
    assert "lacks the hint" in mutants.verdict(vague, "forgot to divide")
    assert mutants.verdict(mutants.Outcome([], [None, (test, "AssertionError", "you forgot to divide")]),
                           "forgot to divide") is None


def test_a_mutant_edit_must_match_the_solution_once():
    from grading.mutant import Mutant

    exercise = EXERCISES["00"]
    with pytest.raises(ValueError, match="occurs 0 times"):
        mutants.planted(exercise, "q1", Mutant("typo", "x", edits=(("no such code", ""),)))
    with pytest.raises(ValueError, match="either edits or source"):
        Mutant("both", "x", edits=(("a", "b"),), source="c")
