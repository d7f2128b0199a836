"""Observability: job fields on log records, OpenTelemetry traces and metrics, and the
Prometheus exposition of the monitoring read model (see docs/observability.md).

Plain Python beside the engine: it imports the contract only, and OpenTelemetry only
when ``opentelemetry-api`` is installed. The Django edge (the dashboard's metrics view,
``manage.py millrace_health``) builds on it.
"""

from millrace_django.observability.logs import FIELDS, JobLogFilter, current_job, job_fields
from millrace_django.observability.telemetry import use

__all__ = ["FIELDS", "JobLogFilter", "current_job", "job_fields", "use"]
