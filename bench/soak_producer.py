"""The soak benchmark's producer (run by ``soak.py`` with ``millrace_processes.environment``).

``backlog TOKEN COUNT``: enqueue COUNT ``stamp`` jobs carrying TOKEN in one transaction.
``steady NAME RATE SECONDS PER_TRANSACTION``: enqueue ``stamp`` jobs at RATE per second
for SECONDS, PER_TRANSACTION jobs per transaction; the jobs of transaction n carry
``NAME-n``.

After each commit it sends the stamp ``c<token>:<count>`` (``peers.harness.stamp``), so
that ``soak.py`` times each job from its transaction's commit to its start. A producer
more than ``MAX_LAG`` behind its schedule skips ahead instead of catching up in a burst,
and says how many jobs it skipped; the loop is bounded by SECONDS and by its count.
"""

from __future__ import annotations

import sys
import time

from peers import harness
from peers.millrace import stamp

from millrace_django import jobs

MAX_LAG = 1.0
"""Seconds behind schedule after which the producer skips ahead."""


def enqueue(token: str, count: int) -> None:
    with jobs.batch() as batch:
        for _ in range(count):
            batch.enqueue(stamp, token)
    harness.stamp(f"c{token}:{count}")


def steady(name: str, rate: float, seconds: float, per_transaction: int) -> None:
    interval = per_transaction / rate
    transactions = int(seconds / interval)
    begin = time.monotonic()
    skipped = 0
    n = 0
    while n < transactions:
        lag = time.monotonic() - (begin + n * interval)
        if lag > MAX_LAG:
            behind = int(lag / interval)
            skipped += behind * per_transaction
            n += behind
            continue
        if lag < 0:
            time.sleep(-lag)
        enqueue(f"{name}-{n}", per_transaction)
        n += 1
    print(f"producer {name}: {transactions} transactions due, {skipped} jobs skipped", flush=True)


def main(arguments: list[str]) -> None:
    match arguments:
        case ["backlog", token, count]:
            enqueue(token, int(count))
        case ["steady", name, rate, seconds, per_transaction]:
            steady(name, float(rate), float(seconds), int(per_transaction))
        case _:
            sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
