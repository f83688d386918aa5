"""A planted wrong answer to an exercise question and the feedback its grader must give it.

Every chapter module of :mod:`grading` has a ``MUTANTS`` table of them (question name -> tuple of
:class:`Mutant`); ``tools/mutants.py`` plants each one in the exercise notebook and runs the question
the way otter's autograder does.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    """A planted wrong answer to one exercise question, and the feedback it must get.

    ``edits`` are ``(old, new)`` replacements applied to the question's solution cell (each ``old``
    must occur there once); ``source`` replaces the whole cell instead. The grader must give it 0
    points, failing with an ``AssertionError`` whose message contains ``hint``
    (``tools/mutants.py`` runs them; ``tests/test_mutants.py`` runs every table).
    """

    name: str
    hint: str
    edits: tuple[tuple[str, str], ...] = ()
    source: str | None = None

    def __post_init__(self):
        if (self.source is None) == (not self.edits):
            raise ValueError(f"mutant {self.name!r}: give either edits or source, not both or neither")
