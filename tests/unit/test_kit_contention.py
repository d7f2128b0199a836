"""A contention the race facts cannot run with is refused when it is declared."""

from __future__ import annotations

import pytest

from millrace_django.conformance import Contention


@pytest.mark.parametrize(
    ("racers", "rounds", "reason"),
    [(2, 5, "three racers"), (3, 3, "every start position"), (8, 8, "every start position")],
)
def test_a_contention_too_weak_for_the_races_is_refused(
    racers: int, rounds: int, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        Contention(racers=racers, rounds=rounds)
