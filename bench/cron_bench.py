"""How late cron fires: one ``manage.py millrace_worker`` with its scheduler (the peer
bench's project, ``peers.django_settings``), an every-minute definition whose next fire
is set, again and again, to a whole second a little ahead; lateness is the job's start
(stamped over loopback UDP) minus that second.

The peer bench measures cron on real minutes: three fires in its 190 s. Setting the due
time instead gives as many fires as asked for in a minute or two, through the same path
(the scheduler sleeps towards the due time it read, fires, the worker is notified and
claims). Configurations alternate round by round. Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]

import psycopg  # noqa: E402
from peer_bench import database_url, recreate_database  # noqa: E402
from peers import harness  # noqa: E402
from pgserver import server_url  # noqa: E402

LEAD = timedelta(seconds=2)
"""How far ahead each fire is set: longer than a scheduler interval (1 s), so the pass
before it reads the new due time and sleeps towards it."""
READY_SECONDS = 60.0
FIRE_TIMEOUT = 10.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fires", type=int, default=20, help="fires per round (20)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per configuration (2)")
    parser.add_argument("--configs", default="default,best", help="peer configurations")
    options = parser.parse_args()
    os.chdir(BENCH)  # ``python -m django`` puts its directory first: this checkout's code
    url = server_url()
    name = f"millrace_cron_{os.getpid()}"
    recreate_database(url, name, create=True)
    os.environ.update(
        PEER_DB_URL=database_url(url, name),
        PEER_SYSTEM="millrace",
        DJANGO_SETTINGS_MODULE="peers.django_settings",
        PYTHONPATH=os.pathsep.join([str(BENCH), str(BENCH.parent)]),
    )
    try:
        lateness = measure(options.configs.split(","), options.rounds, options.fires)
    finally:
        from django.db import connections

        connections.close_all()
        recreate_database(url, name, create=False)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\ncron lateness, {options.fires} fires x {options.rounds} rounds; load {load}")
    print("| configuration | fires | p50 ms | p90 ms | min ms | max ms |")
    print("|---|---|---|---|---|---|")
    for config, values in lateness.items():
        ordered = sorted(values)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        print(
            f"| {config} | {len(values)} | {statistics.median(values):.1f} | {p90:.1f} "
            f"| {ordered[0]:.1f} | {ordered[-1]:.1f} |"
        )


def measure(configs: list[str], rounds: int, fires: int) -> dict[str, list[float]]:
    from peers.millrace import Millrace  # sets Django up: after the environment is

    peer = Millrace()
    peer.prepare()
    lateness: dict[str, list[float]] = {config: [] for config in configs}
    log = Path(os.environ.get("PEER_TMP", "/tmp")) / f"cron_bench_{os.getpid()}.log"
    for _ in range(rounds):
        for config in configs:
            peer.clear()
            listener = harness.StampListener()
            environment = {harness.STAMP_ADDRESS: listener.address, harness.RECURRING: "1"}
            try:
                commands = peer.recurring_commands(config)
                with harness.processes(commands, environment, log) as workers:
                    ready = time.monotonic() + READY_SECONDS
                    while "scheduler started" not in log.read_text(errors="replace"):
                        harness.check_alive(workers, log)
                        if time.monotonic() > ready:
                            raise RuntimeError(f"no scheduler within {READY_SECONDS:g} s")
                        time.sleep(0.1)
                    for _ in range(fires):
                        lateness[config].append(fire_once(listener))
                        harness.check_alive(workers, log)
            finally:
                listener.close()
            shown = ", ".join(f"{value:.1f}" for value in lateness[config][-fires:])
            print(f"{config}: {shown} ms", flush=True)
    return lateness


def fire_once(listener: harness.StampListener) -> float:
    """Set the definition's next fire to a whole second ``LEAD`` ahead; its lateness (a
    stamp from before it, of a fire the worker made on its own, is skipped)."""
    due = datetime.now(UTC).replace(microsecond=0) + LEAD
    with psycopg.connect(os.environ["PEER_DB_URL"], autocommit=True) as connection:
        connection.execute("UPDATE millrace_recurring SET next_fire_time = %s", (due,))
    deadline = time.monotonic() + LEAD.total_seconds() + FIRE_TIMEOUT
    while (left := deadline - time.monotonic()) > 0:
        got = listener.receive(left)
        if got is not None and got[0] == harness.CRON_TOKEN and got[1] > due.timestamp() - 0.5:
            return (got[1] - due.timestamp()) * 1000
    raise RuntimeError(f"the fire due at {due} did not start in time")


if __name__ == "__main__":
    main()
