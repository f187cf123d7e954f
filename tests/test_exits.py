"""Errors a user can act on end in one line and their exit code, with no traceback (parathink.exits)."""

import pytest

from parathink.exits import guarded
from parathink.teacher import TeacherUnavailable
from parathink.training.rl import TrainingDiverged


@pytest.mark.parametrize("err, code", [(TeacherUnavailable("http://127.0.0.1:9/v1: no answer after 4 tries"), 1),
                                       (TrainingDiverged("rl_easy: 3 steps in a row skipped; Lower rl_easy.lr"), 2)])
def test_one_line_and_the_code(capsys, err, code):
    def fail():
        raise err

    assert guarded(fail) == code
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"parathink: error: {err}"]
