"""One process of the idempotency-key race: enqueue a list of keys, some inside
transactions that roll back, and write what each call returned.

Run as ``python -m tests.reliability.key_racer <directory> <seed> <rollback share>
<key>...`` with the harness's process settings. It marks itself ready
(``<directory>/ready-<seed>``), waits for ``<directory>/go`` so every racer starts at
once, then writes one JSON line per key to ``<directory>/outcomes-<seed>.jsonl``:
``{"key", "mode", "new", "id"}`` (``mode``: ``autocommit``, ``atomic`` or ``rollback``,
the last a transaction rolled back after the call; ``new``: the call stored the job it
built, else it returned the holder's id), or ``{"key", "mode", "error"}`` if it raised.
Keys starting with ``rollback-`` are always rolled back.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

GO_SECONDS = 60.0
"""Longest wait for the start signal."""


class Rollback(Exception):
    """Raised inside the transaction to roll it back."""


def race(directory: Path, seed: int, rollback_share: float, keys: list[str]) -> None:
    import django

    django.setup()
    from django.db import transaction

    from millrace_django import assembly
    from millrace_django.contract import JobState
    from tests.reliability.harness import jobs

    client = assembly.client()
    chooser = random.Random(seed)
    order = chooser.sample(keys, len(keys))
    (directory / f"ready-{seed}").touch()
    deadline = time.monotonic() + GO_SECONDS
    while not (directory / "go").exists():
        if time.monotonic() > deadline:
            raise SystemExit("no start signal")
        time.sleep(0.005)
    with (directory / f"outcomes-{seed}.jsonl").open("w") as out:
        for key in order:
            roll_back = key.startswith("rollback-") or chooser.random() < rollback_share
            mode = "rollback" if roll_back else chooser.choice(["autocommit", "atomic"])
            record = client.build(jobs.work, (0.0,), {}, state=JobState.ENQUEUED, key=key)
            outcome: dict[str, Any] = {"key": key, "mode": mode}
            try:
                if mode == "autocommit":
                    returned = client.store([record])[0]
                else:
                    with transaction.atomic():
                        returned = client.store([record])[0]
                        if roll_back:
                            time.sleep(chooser.uniform(0, 0.01))  # hold the key a while
                            raise Rollback
            except Rollback:
                pass
            except Exception as error:
                outcome["error"] = f"{type(error).__name__}: {error}"
            if "error" not in outcome:
                outcome |= {"new": returned == record.id, "id": str(returned)}
            out.write(json.dumps(outcome) + "\n")


if __name__ == "__main__":
    race(Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:])
