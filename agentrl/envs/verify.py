"""Programmatic verifiers: pure functions from (spec, answer, observations, state) to a verdict.

``grounded`` asks whether a correct answer was *read off a tool observation of this
episode* rather than recalled: only successful observations count (text that starts with
"Error:" is an error message and never grounds an answer).
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Any

ANSWER_MARK = "Answer:"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Verdict:
    reward: float
    success: bool
    grounded: bool
    reason: str


def answer_spec(answer: Any, rtol: float = 0.0, atol: float = 0.0) -> dict[str, Any]:
    """Verifier spec for a single answer: numeric (with tolerances) for numbers, else exact."""
    if isinstance(answer, int | float) and not isinstance(answer, bool):
        return {"kind": "numeric", "answer": answer, "rtol": rtol, "atol": atol}
    return {"kind": "exact", "answer": answer}


def extract_answer(text: str | None) -> str | None:
    """The text after the last ``Answer:`` mark, or None when the model gave no answer."""
    if not text or ANSWER_MARK not in text:
        return None
    return text.rsplit(ANSWER_MARK, 1)[1].strip() or None


def normalize(text: Any) -> str:
    """Lowercase, strip surrounding punctuation and quotes, collapse whitespace."""
    out = " ".join(str(text).lower().split())
    return out.strip(string.punctuation + " ")


def numbers_in(text: str) -> list[float]:
    return [float(m) for m in _NUMBER.findall(text.replace(",", ""))]


def _close(value: float, target: float, rtol: float, atol: float) -> bool:
    return abs(value - target) <= atol + rtol * abs(target)


def usable(observations: list[str]) -> list[str]:
    """The observations that are results, not error messages."""
    return [o for o in observations if not o.lstrip().startswith("Error:")]


def check_answer(
    spec: dict[str, Any], answer: str | None, observations: list[str]
) -> tuple[bool, bool]:
    """(correct, grounded) of an answer against a numeric or exact spec."""
    if answer is None:
        return False, False
    seen = usable(observations)
    if isinstance(spec["answer"], int | float) and not isinstance(spec["answer"], bool):
        found = numbers_in(answer)
        if len(found) != 1:
            return False, False
        rtol, atol = spec.get("rtol", 1e-6), spec.get("atol", 1e-6)
        correct = _close(found[0], float(spec["answer"]), rtol, atol)
        grounded = any(_close(found[0], n, rtol, atol) for o in seen for n in numbers_in(o))
        return correct, correct and grounded
    target = normalize(spec["answer"])
    correct = normalize(answer) == target
    grounded = any(target in normalize(o) for o in seen)
    return correct, correct and grounded


def verify(
    spec: dict[str, Any], final_text: str | None, observations: list[str], final_state: Any = None
) -> Verdict:
    """Score an episode. Kinds: ``exact``, ``numeric``, ``state`` (final state + answer) and
    ``none`` (a question nobody knows the answer to: a chat session's).

    >>> verify({"kind": "none"}, "Answer: 4", ["4"])
    Verdict(reward=0.0, success=False, grounded=False, reason='unverified')
    """
    if spec["kind"] == "none":
        return Verdict(0.0, False, False, "unverified")
    answer = extract_answer(final_text)
    if spec["kind"] == "state" and final_state != spec["expected"]:
        return Verdict(0.0, False, False, "wrong_state")
    correct, grounded = check_answer(spec, answer, observations)
    if answer is None:
        return Verdict(0.0, False, False, "no_answer")
    if not correct:
        return Verdict(0.0, False, False, "wrong_answer")
    return Verdict(1.0, True, grounded, "ok" if grounded else "ungrounded")
