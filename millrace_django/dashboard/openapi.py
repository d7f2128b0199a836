"""The API's OpenAPI 3.1 document, written by hand next to the views it describes.

A test walks the URL patterns and checks that every API route is documented here (and
nothing more), so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from millrace_django.contract import (
    CONTINUATION_CAP,
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    AttemptOutcome,
    InstanceState,
    JobState,
    OverlapPolicy,
    RetryKind,
)
from millrace_django.dashboard.actions import (
    InstanceAction,
    JobAction,
    QueueAction,
    RecurringAction,
)

type Schema = dict[str, Any]


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


STRING = {"type": "string"}
INTEGER = {"type": "integer"}
NUMBER = {"type": "number"}
INSTANT = {"type": "string", "format": "date-time"}
UUID_SCHEMA = {"type": "string", "format": "uuid"}
SECONDS = {"type": "number", "description": "seconds"}
ANY_JSON: Schema = {"description": "any JSON value"}


def _object(properties: Schema, required: list[str] | None = None) -> Schema:
    return {
        "type": "object",
        "properties": properties,
        "required": required if required is not None else list(properties),
    }


def _page(item: str) -> Schema:
    return _object(
        {
            "items": {"type": "array", "items": _ref(item)},
            "nextCursor": _nullable(
                {"type": "string", "description": "pass back as cursor; null on the last page"}
            ),
        }
    )


JOB_SUMMARY = _object(
    {
        "id": UUID_SCHEMA,
        "queue": STRING,
        "state": _ref("JobState"),
        "target": STRING,
        "priority": INTEGER,
        "createdAt": INSTANT,
        "dueAt": _nullable(INSTANT),
        "finishedAt": _nullable(INSTANT),
        "attempt": INTEGER,
        "failures": INTEGER,
        "interruptions": {
            **INTEGER,
            "description": "attempts that ended without an outcome (a lost lease, a crash, "
            "a release); never the one running, a success, a failure, a cancel or a verdict",
        },
        "tenantId": _nullable(STRING),
        "workerId": _nullable(STRING),
        "workflowInstanceId": _nullable(UUID_SCHEMA),
        "workflowDefinitionId": _nullable(
            {**STRING, "description": "null once the instance is gone"}
        ),
        "activityNodeId": _nullable(
            {**STRING, "description": "the workflow step the job runs, resumes or recovers"}
        ),
    }
)

JOB_DETAILS: Schema = {
    "allOf": [
        _ref("JobSummary"),
        _object(
            {
                "invocation": _object(
                    {
                        "target": STRING,
                        "args": {"type": "array", "items": ANY_JSON},
                        "kwargs": {"type": "object"},
                    }
                ),
                "retry": _object(
                    {
                        "kind": {"enum": [k.value for k in RetryKind]},
                        "maxAttempts": INTEGER,
                        "baseDelay": SECONDS,
                        "maxDelay": SECONDS,
                        "jitter": {"type": "boolean"},
                        "retryOn": {
                            "type": "array",
                            "items": STRING,
                            "description": "exception classes ('module.QualName') a failure "
                            "must be one of to be retried; empty: any",
                        },
                        "giveUpOn": {
                            "type": "array",
                            "items": STRING,
                            "description": "exception classes whose failures are final",
                        },
                    }
                ),
                "timeout": _nullable(SECONDS),
                "hardTimeout": {
                    **_nullable(SECONDS),
                    "description": "each attempt runs in a child process killed at this limit",
                },
                "idempotencyKey": _nullable(STRING),
                "parentId": _nullable(UUID_SCHEMA),
                "requeuedFrom": _nullable(UUID_SCHEMA),
                "recurringId": _nullable(STRING),
                "tags": {
                    "type": "array",
                    "items": STRING,
                    "description": "the job's tags, sorted (from @job(tags=...) or using())",
                },
                "expiresAt": {
                    **_nullable(INSTANT),
                    "description": "the deadline: no execution starts at or after it; a job "
                    "that ended by it is cancelled, lastError 'expired: not started by its "
                    "deadline ...'",
                },
                "lastError": _nullable(STRING),
                "result": ANY_JSON,
                "progress": ANY_JSON,
                "checkpoint": {
                    **ANY_JSON,
                    "description": "the job's own checkpoint (context.checkpoint), as its "
                    "latest attempt to save one left it: where the next attempt resumes",
                },
                "logs": {
                    "type": "array",
                    "items": _object({"at": INSTANT, "message": STRING}),
                    "description": "oldest first, the newest 200",
                },
                "leaseUntil": _nullable(INSTANT),
                "cancelRequested": {"type": "boolean"},
                "attempts": {
                    "type": "array",
                    "items": _ref("JobAttempt"),
                    "description": "executions that ended badly, newest first, at most 10",
                },
                "continuations": {
                    "type": "array",
                    "items": _ref("JobSummary"),
                    "description": "the jobs continuing this one, newest first, "
                    f"at most {CONTINUATION_CAP}",
                },
            }
        ),
    ]
}

SCHEMAS: Schema = {
    "JobState": {"enum": [s.value for s in JobState]},
    "InstanceState": {"enum": [s.value for s in InstanceState]},
    "JobSummary": JOB_SUMMARY,
    "JobAttempt": _object(
        {
            "attempt": INTEGER,
            "outcome": {"enum": [o.value for o in AttemptOutcome]},
            "recordedAt": INSTANT,
            "workerId": _nullable(STRING),
            "error": _nullable(STRING),
        }
    ),
    "JobDetails": JOB_DETAILS,
    "JobPage": _page("JobSummary"),
    "RecurringSummary": _object(
        {
            "id": STRING,
            "cron": STRING,
            "timezone": STRING,
            "queue": STRING,
            "target": STRING,
            "priority": INTEGER,
            "tenantId": _nullable(STRING),
            "nextFireTime": INSTANT,
            "lastFireTime": _nullable(INSTANT),
            "lastOutcome": _nullable(_ref("JobState")),
            "lastJobId": _nullable(UUID_SCHEMA),
            "overlap": {
                "enum": [p.value for p in OverlapPolicy],
                "description": "what an occurrence does while the previous job is active",
            },
            "lastSkipTime": {
                **_nullable(INSTANT),
                "description": "the occurrence overlap 'skip' last dropped",
            },
            "enabled": {
                "type": "boolean",
                "description": "false while an operator has it disabled: it does not fire",
            },
            "createdAt": INSTANT,
            "updatedAt": INSTANT,
        }
    ),
    "RecurringPage": _page("RecurringSummary"),
    "InstanceSummary": _object(
        {
            "id": UUID_SCHEMA,
            "definitionId": STRING,
            "definitionVersion": INTEGER,
            "state": _ref("InstanceState"),
            "tenantId": _nullable(STRING),
            "createdAt": INSTANT,
            "updatedAt": INSTANT,
            "revision": INTEGER,
        }
    ),
    "InstancePage": _page("InstanceSummary"),
    "InstanceDetails": {
        "allOf": [
            _ref("InstanceSummary"),
            _object(
                {
                    "data": ANY_JSON,
                    "error": _nullable(STRING),
                    "failedNode": _nullable(STRING),
                    "stuck": {
                        "type": "array",
                        "description": "failures waiting for an operator's recovery",
                        "items": _object(
                            {
                                "jobId": UUID_SCHEMA,
                                "kind": STRING,
                                "node": STRING,
                                "error": _nullable(STRING),
                            }
                        ),
                    },
                    "pendingJobs": {
                        "type": "array",
                        "items": _object({"jobId": UUID_SCHEMA, "kind": STRING, "node": STRING}),
                    },
                    "position": _nullable(
                        _object(
                            {
                                key: {"type": "array", "items": STRING}
                                for key in (
                                    "done",
                                    "running",
                                    "waiting",
                                    "compensating",
                                    "failed",
                                )
                            }
                            | {"state": _ref("InstanceState")}
                        )
                    ),
                    "graph": _nullable(
                        {
                            "type": "object",
                            "description": "the definition's nodes and typed edges; null "
                            "when the definition is not loaded in the server process",
                        }
                    ),
                }
            ),
        ]
    },
    "Statistics": _object(
        {
            "jobsByState": {
                "type": "object",
                "description": "every state, zeros included",
                "additionalProperties": INTEGER,
            },
            "enqueuedByQueue": {"type": "object", "additionalProperties": INTEGER},
            "instancesByState": {"type": "object", "additionalProperties": INTEGER},
            "recurringDefinitions": INTEGER,
            "overdueRecurringDefinitions": INTEGER,
        }
    ),
    "CatalogEntry": _object(
        {
            "target": STRING,
            "jobsByState": {
                "type": "object",
                "description": "every state, zeros included; finished jobs as long as they "
                "are kept, from maintained counts",
                "additionalProperties": INTEGER,
            },
            "failureRate": {
                **_nullable(NUMBER),
                "description": "dead / (succeeded + dead) of the kept jobs; null before any",
            },
            "lastError": {
                **_nullable(STRING),
                "description": "of the newest (by creation) dead job, or failed job awaiting "
                "its retry",
            },
            "lastErrorJobId": _nullable(UUID_SCHEMA),
            "lastErrorAt": {**_nullable(INSTANT), "description": "when that job was created"},
            "recentRuns": {**INTEGER, "description": "successes that finished in the last hour"},
            "runTimeP50": {
                **_nullable(SECONDS),
                "description": "median run time (claim to end) of those successes: a bucket "
                "estimate, the upper bound of the bucket it falls in; null without any",
            },
            "runTimeP95": {
                **_nullable(SECONDS),
                "description": "95th percentile, a bucket estimate like runTimeP50",
            },
        }
    ),
    "Catalog": _object({"items": {"type": "array", "items": _ref("CatalogEntry")}}),
    "Info": _object({"apiVersion": {"const": "v1"}, "storageProvider": STRING}),
    "Queues": _object(
        {
            "queues": {
                "type": "array",
                "items": _object(
                    {
                        "name": STRING,
                        "enqueued": INTEGER,
                        "paused": _nullable({"type": "boolean"}),
                    }
                ),
            },
            "workers": _nullable(
                {
                    "type": "array",
                    "items": _object(
                        {
                            "workerId": STRING,
                            "hostname": STRING,
                            "pid": INTEGER,
                            "queues": {"type": "array", "items": STRING},
                            "concurrency": INTEGER,
                            "inFlight": INTEGER,
                            "startedAt": INSTANT,
                            "seenAt": INSTANT,
                            "gone": {"type": "boolean"},
                        }
                    ),
                }
            ),
            "limits": {
                "type": "array",
                "description": "Per queue and job function whose jobs carry a limit: the "
                "limit and how many of its jobs run and wait (read from active jobs only).",
                "items": _object(
                    {
                        "scope": STRING,
                        "kind": {"enum": ["queue", "job"]},
                        "name": STRING,
                        "concurrency": _nullable(INTEGER),
                        "rate": _nullable({"type": "string", "examples": ["10/s", "600/m"]}),
                        "running": INTEGER,
                        "waiting": INTEGER,
                        "keys": INTEGER,
                    }
                ),
            },
        }
    ),
    "Done": _object(
        {
            "message": STRING,
            "id": {**UUID_SCHEMA, "description": "requeue only: the new job's id"},
        },
        ["message"],
    ),
    "BulkDone": _object(
        {
            "message": STRING,
            "done": {"type": "array", "items": STRING},
            "refused": {
                "type": "array",
                "items": _object({"id": STRING, "reason": STRING, "status": INTEGER}),
            },
        }
    ),
    "Problem": _object(
        {
            "type": STRING,
            "title": STRING,
            "status": INTEGER,
            "detail": STRING,
            "errors": {"type": "object", "description": "per parameter, for a bad query"},
        },
        ["type", "title", "status"],
    ),
}


def _query(name: str, description: str, schema: Schema, *, repeat: bool = False) -> Schema:
    parameter: Schema = {"name": name, "in": "query", "required": False}
    parameter["description"] = description
    if repeat:
        parameter.update(schema={"type": "array", "items": schema}, style="form", explode=True)
    else:
        parameter["schema"] = schema
    return parameter


def _path(name: str, schema: Schema, description: str = "") -> Schema:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": schema,
        "description": description,
    }


TENANT = [
    _query("tenant", "only this tenant's rows", STRING),
    _query("untenanted", "only rows without a tenant (wins over tenant)", {"type": "boolean"}),
]
PAGING = [
    _query("cursor", "opaque; from a previous page's nextCursor (a bad one is a 400)", STRING),
    _query(
        "limit",
        f"page size; <1 means {DEFAULT_PAGE_SIZE}, above {MAX_PAGE_SIZE} means {MAX_PAGE_SIZE}",
        INTEGER,
    ),
]
CREATED = [
    _query("createdAfter", "created at or after (inclusive)", INSTANT),
    _query("createdBefore", "created before (exclusive)", INSTANT),
]


def _json(schema: Schema, description: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _problem(description: str) -> Schema:
    return {
        "description": description,
        "content": {"application/problem+json": {"schema": _ref("Problem")}},
    }


NOT_FOUND = _problem("unknown, nothing to act on, or access denied (denials are 404 too)")
BAD = _problem("invalid parameters or cursor")
BAD_NAME = _problem("a name in the path holding a NUL character (%00)")
NAME_IN_PATH = "as it is, '/' included (plain or %2F); %00 is a 400"


def _get(summary: str, ok: Schema, parameters: list[Schema] | None = None) -> Schema:
    operation: Schema = {"summary": summary, "responses": {"200": ok, "404": NOT_FOUND}}
    if parameters:
        operation["parameters"] = parameters
        operation["responses"]["400"] = BAD
    return {"get": operation}


def _post(summary: str, responses: Schema, body: Schema | None = None) -> Schema:
    operation: Schema = {"summary": summary, "responses": {**responses, "404": NOT_FOUND}}
    operation["responses"]["403"] = _problem("missing or wrong CSRF token")
    if body is not None:
        operation["requestBody"] = body
    return {"post": operation}


PATHS: Schema = {
    "/info": _get("API version and storage provider", _json(_ref("Info"), "the API")),
    "/statistics": _get(
        "Counts per state (zeros included), queue depths, recurring and overdue",
        _json(_ref("Statistics"), "statistics"),
        TENANT,
    ),
    "/jobs": _get(
        "Jobs, newest first (keyset pages, no totals; no arguments in the list)",
        _json(_ref("JobPage"), "one page"),
        [
            _query("state", "any of these states", _ref("JobState"), repeat=True),
            _query("queue", "exact queue name", STRING),
            _query("target", "text the target starts with, letter case exact (indexed)", STRING),
            _query(
                "targetContains",
                "text the target contains, in any letter case (reads every job unless indexed)",
                STRING,
            ),
            _query(
                "tag",
                "jobs carrying this tag (1-64 letters, digits, _ - . :; read through the tags' "
                "index); a malformed tag is a 400",
                STRING,
            ),
            *TENANT,
            *CREATED,
            *PAGING,
        ],
    ),
    "/catalog": _get(
        "Every job function with its counts per state, failure rate and last error, by "
        "target (read from maintained counts, never by counting finished jobs)",
        _json(_ref("Catalog"), "the catalog"),
        TENANT,
    ),
    "/catalog/{target}": {
        **_get(
            "One job function's catalog entry (404 when no job of it is stored)",
            _json(_ref("CatalogEntry"), "the entry"),
            TENANT,
        ),
        "parameters": [
            _path("target", STRING, "the dotted target; over 500 characters or %00 is a 400")
        ],
    },
    "/jobs/{id}": {
        **_get(
            "One job with its arguments, result, error, attempts, progress and logs",
            _json(_ref("JobDetails"), "the job"),
        ),
        "parameters": [_path("id", UUID_SCHEMA)],
    },
    "/jobs/{id}/{action}": {
        **_post(
            "cancel (unfinished jobs), run-now (scheduled jobs, failed jobs awaiting a retry), "
            "requeue "
            "(finished jobs: a new job is minted) or delete (finished jobs, with their "
            "history)",
            {
                "200": _json(_ref("Done"), "done"),
                "409": _problem("requeue or delete of a job that is not finished"),
            },
        ),
        "parameters": [
            _path("id", UUID_SCHEMA),
            _path("action", {"enum": [a.value for a in JobAction]}),
        ],
    },
    "/jobs/bulk/{action}": {
        **_post(
            "The same action on several jobs; refusals are listed, not fatal",
            {"200": _json(_ref("BulkDone"), "what was done and what was refused"), "400": BAD},
            _json(
                _object({"ids": {"type": "array", "items": UUID_SCHEMA, "maxItems": 200}}),
                "the jobs",
            )
            | {"required": True},
        ),
        "parameters": [_path("action", {"enum": [a.value for a in JobAction]})],
    },
    "/queues": _get(
        "Queues (enqueued count, paused), the worker registry (null: not offered by the "
        "storage; a worker not seen for 3 heartbeats is gone) and the flow-control limits in "
        "use",
        _json(_ref("Queues"), "queues and workers"),
    ),
    "/queues/{queue}/{action}": {
        **_post(
            "pause (claims skip the queue from the next poll; running jobs finish) or resume; "
            "both idempotent",
            {"200": _json(_ref("Done"), "done"), "400": BAD},
        ),
        "parameters": [
            _path("queue", STRING, f"the queue's name, {NAME_IN_PATH}"),
            _path("action", {"enum": [a.value for a in QueueAction]}),
        ],
    },
    "/recurring": _get(
        "Recurring definitions, soonest first, with their last outcome",
        _json(_ref("RecurringPage"), "one page"),
        [_query("queue", "exact queue name", STRING), *TENANT, *PAGING],
    ),
    "/recurring/{id}/trigger": {
        **_post(
            "Enqueue one extra occurrence now (the schedule does not move)",
            {"200": _json(_ref("Done"), "enqueued"), "400": BAD_NAME},
        ),
        "parameters": [_path("id", STRING, f"the definition's id, {NAME_IN_PATH}")],
    },
    "/recurring/{id}/{action}": {
        **_post(
            "trigger (one extra occurrence now), disable (no fire until enabled; occurrences "
            "missed meanwhile are dropped), enable (fires next at its first occurrence after "
            "now) or delete (the jobs it fired are kept)",
            {"200": _json(_ref("Done"), "done"), "400": BAD_NAME},
        ),
        "parameters": [
            _path("id", STRING, f"the definition's id, {NAME_IN_PATH}"),
            _path("action", {"enum": [a.value for a in RecurringAction]}),
        ],
    },
    "/recurring/{id}/edit": {
        **_post(
            "Change the cron, time zone or arguments (args/kwargs, given either, replace the "
            "stored arguments whole); a changed schedule fires next after now. A refusal "
            "names the field in errors and changes nothing",
            {
                "200": _json(_ref("Done"), "saved"),
                "400": _problem("a bad body, cron, time zone or arguments (errors per field)"),
            },
            _json(
                _object(
                    {
                        "cron": STRING,
                        "timezone": {**STRING, "description": "an IANA name such as 'UTC'"},
                        "args": {"type": "array"},
                        "kwargs": {"type": "object"},
                    },
                    [],
                ),
                "the fields to change (at least one)",
            )
            | {"required": True},
        ),
        "parameters": [_path("id", STRING, f"the definition's id, {NAME_IN_PATH}")],
    },
    "/instances": _get(
        "Workflow instances, newest first",
        _json(_ref("InstancePage"), "one page"),
        [
            _query("state", "any of these states", _ref("InstanceState"), repeat=True),
            _query("definitionId", "one definition", STRING),
            _query("definitionVersion", "one version (needs definitionId)", INTEGER),
            *TENANT,
            *CREATED,
            *PAGING,
        ],
    ),
    "/instances/{id}": {
        **_get(
            "One instance with its data, failures, live position and graph",
            _json(_ref("InstanceDetails"), "the instance"),
        ),
        "parameters": [_path("id", UUID_SCHEMA)],
    },
    "/instances/{id}/recovery/{action}": {
        **_post(
            "Answer a suspended instance's failure: retry, skip or abandon (a job does it)",
            {"202": _json(_ref("Done"), "accepted"), "400": _problem("unknown action")},
            _json(
                _object({"jobId": UUID_SCHEMA}, []),
                "optional: which failure (default: the oldest)",
            ),
        ),
        "parameters": [
            _path("id", UUID_SCHEMA),
            _path(
                "action",
                {"enum": [a.value for a in InstanceAction if a is not InstanceAction.CANCEL]},
                "case-insensitive",
            ),
        ],
    },
    "/instances/{id}/cancel": {
        **_post("Cancel an unfinished instance", {"200": _json(_ref("Done"), "cancelled")}),
        "parameters": [_path("id", UUID_SCHEMA)],
    },
    "/signals/{name}/{correlationId}": {
        **_post(
            "Resume the instance waiting longest for this signal and correlation id",
            {"200": _json(_ref("Done"), "delivered"), "400": _problem("bad JSON or payload")},
            _json(ANY_JSON, "the payload (raw JSON; an empty body sends null)"),
        ),
        "parameters": [
            _path("name", STRING, "the signal's name (no '/')"),
            _path("correlationId", STRING, NAME_IN_PATH),
        ],
    },
    "/openapi.json": _get("This document", _json({"type": "object"}, "OpenAPI 3.1")),
}


def schema(server: str = "/") -> Schema:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Millrace dashboard API",
            "version": "v1",
            "description": "The dashboard's read model and operator actions. Every request "
            "passes the dashboard's authorization; a denied one is answered 404. Actions are "
            "POST with Django's CSRF token (X-CSRFToken header).",
        },
        "servers": [{"url": server}],
        "paths": PATHS,
        "components": {"schemas": SCHEMAS},
    }
