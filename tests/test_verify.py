"""Verifiers on positive and negative cases, including grounding."""

from __future__ import annotations

import pytest

from agentrl.envs.verify import extract_answer, verify

NUMERIC = {"kind": "numeric", "answer": 444, "rtol": 0.0, "atol": 0.0}
EXACT = {"kind": "exact", "answer": "Lenor"}
STATE = {"kind": "state", "expected": {"lamp": 5}, "answer": 5, "rtol": 0.0, "atol": 0.0}


@pytest.mark.parametrize(
    ("spec", "final", "observations", "state", "success", "grounded", "reason"),
    [
        (NUMERIC, "Answer: 444", ["444"], None, True, True, "ok"),
        (NUMERIC, "Answer: 444.0", ['{"result": 444}'], None, True, True, "ok"),
        (NUMERIC, "Answer: 445", ["444"], None, False, False, "wrong_answer"),
        (NUMERIC, "Answer: 444", ["12"], None, True, False, "ungrounded"),
        (NUMERIC, "Answer: 444", ["Error: no entity 444"], None, True, False, "ungrounded"),
        (NUMERIC, "Answer: 444 or 445", ["444"], None, False, False, "wrong_answer"),
        (NUMERIC, "It is 444.", ["444"], None, False, False, "no_answer"),
        (
            {"kind": "numeric", "answer": 1.6093, "rtol": 1e-3, "atol": 1e-3},
            "Answer: 1.609",
            ["1.6093"],
            None,
            True,
            True,
            "ok",
        ),
        (EXACT, "Answer: lenor.", ["Lenor"], None, True, True, "ok"),
        (EXACT, "Answer: Lenar", ["Lenor"], None, False, False, "wrong_answer"),
        (EXACT, "Answer: Lenor", ["Mayor is unknown"], None, True, False, "ungrounded"),
        (STATE, "Answer: 5", ["5"], {"lamp": 5}, True, True, "ok"),
        (STATE, "Answer: 5", ["5"], {"lamp": 4}, False, False, "wrong_state"),
        (STATE, "Answer: 4", ["5"], {"lamp": 5}, False, False, "wrong_answer"),
    ],
)
def test_verdicts(spec, final, observations, state, success, grounded, reason) -> None:
    verdict = verify(spec, final, observations, state)
    assert (verdict.success, verdict.grounded, verdict.reason) == (success, grounded, reason)
    assert verdict.reward == (1.0 if success else 0.0)


def test_extract_answer_takes_the_last_mark() -> None:
    assert extract_answer("Answer: 1. Wait. Answer: 2") == "2"
    assert extract_answer("Answer:   ") is None
    assert extract_answer(None) is None
