"""Workflow benchmark: three-step linear workflows drained from a backlog on PostgreSQL,
beside plain no-op jobs drained the same way, then Millrace beside DBOS (see
bench/README.md).

Creates a dedicated database on the server named by ``MILLRACE_TEST_POSTGRES_URL``,
migrates it, then for each worker configuration:

- seeds ``3 x instances`` no-op jobs and times one in-process ``Worker`` (with the
  connection hooks of ``manage.py millrace_worker``) running until idle: plain jobs/s;
- starts ``instances`` instances of a three-step linear workflow (timed: starts/s), and
  times the same worker draining them: instances/s, and the workflow jobs/s behind them
  (each activity is one job whose success carries the checkpoint and the next job).

Then, unless ``--no-peers``, the peer run (``workflow_peer_run``): a linear workflow, a
fan-out and a signal round trip on Millrace and on DBOS, one worker process each,
interleaved and repeated (DBOS installed into .tmp/bench-workflow-peers/venv).

It prints figures and asserts nothing; the databases are dropped at the end. Every drain
is bounded in time (a capped drain is reported as such).

    make bench-workflows                                  # durable throwaway server
    eval "$(scripts/testdb.sh start)"; .venv/bin/python bench/workflow_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from peer_bench import chosen_systems
from worker_bench import (
    SEED_CHUNK,
    recreate_database,
    run_bounded,
    server_url,
    setup_django,
    sql,
)
from workflow_peer_run import FULL as FULL_PEERS
from workflow_peer_run import QUICK as QUICK_PEERS
from workflow_peer_run import SYSTEMS, json_report, markdown, run_peers

STEPS = 3


@dataclass(frozen=True)
class Sizes:
    instances: int
    configurations: tuple[tuple[int | None, int | None], ...]
    """(claim_batch, concurrency); ``None`` keeps the default."""
    cap: float


FULL = Sizes(instances=2_000, configurations=((None, None), (64, 64)), cap=180.0)
QUICK = Sizes(instances=300, configurations=((None, None),), cap=60.0)


@dataclass
class Row:
    configuration: str
    plain_jobs: int
    plain_seconds: float
    plain_capped: bool
    instances: int
    start_seconds: float
    workflow_seconds: float
    completed: int
    workflow_jobs: int
    workflow_capped: bool

    @property
    def plain_per_second(self) -> float:
        return self.plain_jobs / self.plain_seconds if self.plain_seconds else 0.0

    @property
    def instances_per_second(self) -> float:
        return self.completed / self.workflow_seconds if self.workflow_seconds else 0.0

    @property
    def workflow_jobs_per_second(self) -> float:
        return self.workflow_jobs / self.workflow_seconds if self.workflow_seconds else 0.0


def storage() -> Any:
    from millrace_django.clock import SystemClock
    from millrace_django.storage.orm import DjangoStorage

    return DjangoStorage("bench", SystemClock())


def configuration(claim_batch: int | None, concurrency: int | None) -> Any:
    from millrace_django.conf import MillraceSettings

    defaults = MillraceSettings(database="bench")
    return replace(
        defaults,
        claim_batch=claim_batch or defaults.claim_batch,
        concurrency=concurrency or defaults.concurrency,
    )


def empty_tables() -> None:
    sql(
        "TRUNCATE millrace_job, millrace_job_attempt, millrace_job_log, millrace_job_tag, "
        "millrace_workflow_instance, millrace_bookmark"
    )


def new_worker(store: Any, config: Any) -> Any:
    from millrace_django.management.support import connection_hooks
    from millrace_django.runtime import Worker

    return Worker(store, store.clock, config, hooks=connection_hooks())


def count(statement: str, *params: Any) -> int:
    return int(sql(statement, list(params))[0][0])


def drain_plain(store: Any, config: Any, jobs: int, cap: float) -> tuple[float, bool, int]:
    import worker_bench_jobs

    from millrace_django.contract import JobState
    from millrace_django.engine import JobClient
    from millrace_django.models import JOB_STATE_CODES

    empty_tables()
    client = JobClient(store, store.clock, config)
    left = jobs
    while left:
        chunk = min(left, SEED_CHUNK)
        store.enqueue(
            [
                client.build(worker_bench_jobs.noop, (), {}, state=JobState.ENQUEUED, key=None)
                for _ in range(chunk)
            ]
        )
        left -= chunk
    sql("VACUUM (ANALYZE) millrace_job")
    elapsed, capped = run_bounded(new_worker(store, config), cap, until_idle=True)
    done = count(
        "SELECT count(*) FROM millrace_job WHERE state = %s", JOB_STATE_CODES[JobState.SUCCEEDED]
    )
    return elapsed, capped, done


def drain_workflows(
    store: Any, config: Any, instances: int, cap: float
) -> tuple[float, float, bool, int, int]:
    import workflow_bench_flows

    from millrace_django.contract import InstanceState, JobState
    from millrace_django.engine.workflow import WorkflowClient
    from millrace_django.models import INSTANCE_STATE_CODES, JOB_STATE_CODES

    empty_tables()
    client = WorkflowClient(store, store.clock, config)
    begin = time.perf_counter()
    for number in range(instances):
        client.start(workflow_bench_flows.THREE_STEPS, {"n": number})
    started = time.perf_counter() - begin
    sql("VACUUM (ANALYZE) millrace_job")
    sql("VACUUM (ANALYZE) millrace_workflow_instance")
    elapsed, capped = run_bounded(new_worker(store, config), cap, until_idle=True)
    completed = count(
        "SELECT count(*) FROM millrace_workflow_instance WHERE state = %s",
        INSTANCE_STATE_CODES[InstanceState.COMPLETED],
    )
    jobs = count(
        "SELECT count(*) FROM millrace_job WHERE state = %s", JOB_STATE_CODES[JobState.SUCCEEDED]
    )
    return started, elapsed, capped, completed, jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="small counts, one repetition (under 2 minutes)"
    )
    parser.add_argument("--no-peers", action="store_true", help="no peer run at all")
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"the peer run's systems, comma-separated, from {','.join(SYSTEMS)}",
    )
    parser.add_argument("--repeats", type=int, help="peer run repetitions (3; 1 with --quick)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    options = parser.parse_args()
    systems = chosen_systems(parser, options.systems, SYSTEMS)
    sizes = QUICK if options.quick else FULL
    peer_sizes = QUICK_PEERS if options.quick else FULL_PEERS
    if options.repeats is not None:
        if options.repeats < 1:
            parser.error("--repeats must be at least 1")
        peer_sizes = replace(peer_sizes, repeats=options.repeats)

    url = server_url()
    name = f"millrace_workflow_bench_{os.getpid()}"
    recreate_database(url, name, create=True)
    rows: list[Row] = []
    try:
        setup_django(url, name)
        import django

        print(
            "millrace workflow bench" + (" (--quick)" if options.quick else ""),
            f"\n  python {sys.version.split()[0]}, django {django.get_version()}, "
            f"postgresql {sql('SHOW server_version')[0][0]}, {os.cpu_count()} cpus, "
            f"load {' '.join(f'{v:.2f}' for v in os.getloadavg())}",
        )
        print(
            f"\n{sizes.instances:,} three-step linear workflows vs "
            f"{sizes.instances * STEPS:,} plain no-op jobs, one worker until idle\n"
        )
        store = storage()
        for claim_batch, concurrency in sizes.configurations:
            config = configuration(claim_batch, concurrency)
            label = (
                "default"
                if claim_batch is None
                else f"tuned {config.claim_batch}/{config.concurrency}"
            )
            plain_seconds, plain_capped, _ = drain_plain(
                store, config, sizes.instances * STEPS, sizes.cap
            )
            started, seconds, capped, completed, jobs = drain_workflows(
                store, config, sizes.instances, sizes.cap
            )
            row = Row(
                configuration=label,
                plain_jobs=sizes.instances * STEPS,
                plain_seconds=plain_seconds,
                plain_capped=plain_capped,
                instances=sizes.instances,
                start_seconds=started,
                workflow_seconds=seconds,
                completed=completed,
                workflow_jobs=jobs,
                workflow_capped=capped,
            )
            rows.append(row)
            print(
                f"  {label:<16} batch {config.claim_batch:>3} concurrency "
                f"{config.concurrency:>3}\n"
                f"    plain jobs      {row.plain_per_second:8,.0f} jobs/s"
                + ("  (capped)" if plain_capped else "")
                + f"\n    workflows       {row.instances_per_second:8,.0f} instances/s  "
                f"({row.workflow_jobs_per_second:,.0f} workflow jobs/s; "
                f"{completed:,}/{sizes.instances:,} completed in {seconds:.2f} s)"
                + ("  (capped)" if capped else "")
                + f"\n    starting        {sizes.instances / started:8,.0f} starts/s "
                "(one atom each: instance + first job)",
                flush=True,
            )
    finally:
        from django.db import connections

        connections.close_all()
        recreate_database(url, name, create=False)
    payload: dict[str, Any] = {
        "plain_vs_workflow": [
            {
                **asdict(row),
                "plain_per_second": row.plain_per_second,
                "instances_per_second": row.instances_per_second,
                "workflow_jobs_per_second": row.workflow_jobs_per_second,
            }
            for row in rows
        ]
    }
    if systems and not options.no_peers:
        print(flush=True)
        report = run_peers(peer_sizes, systems)
        print(markdown(report, options.quick), flush=True)
        payload["peers"] = json_report(report)
    if options.json:
        with open(options.json, "w") as output:
            json.dump(payload, output, indent=2, default=str)


if __name__ == "__main__":
    main()
