"""How hard the race facts race, scaled per provider so the kit stays strict and fast.

A race fact releases ``racers`` threads together, ``rounds`` times over, rotating the odd
racer (the finisher, the canceller) through every start position. A binding declares the
contention its store calls for on its fact groups::

    class MySqliteBinding:
        contention = SINGLE_WRITER_CONTENTION
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Contention:
    """``racers`` threads released together, ``rounds`` times over."""

    racers: int
    rounds: int

    def __post_init__(self) -> None:
        if self.racers < 3:
            raise ValueError("a race needs three racers: the odd one first, between, last")
        if self.rounds <= self.racers:
            raise ValueError("the odd racer needs a round at every start position")


FULL_CONTENTION = Contention(racers=8, rounds=10)
"""The default: for stores whose writing transactions run at once (row locks, MVCC),
where a read-then-write slips only when racers overlap inside their transactions."""

SINGLE_WRITER_CONTENTION = Contention(racers=3, rounds=4)
"""For stores that run one writing transaction at a time (SQLite, whose writers take the
database lock as they begin). Their racers never overlap inside a transaction, they queue
for it: a race can only come out differently by the order in which they get it, and three
racers rotated over four rounds have the odd one go first, in between and last. More
racers add only waiting, and a waiting SQLite writer sleeps between retries."""
