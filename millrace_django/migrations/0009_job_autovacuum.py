"""Per-table autovacuum settings for millrace_job on PostgreSQL (docs/storage.md).

Every job's row is rewritten several times (claimed, acknowledged) and finished rows
are purged in batches, so dead rows pile up fast. PostgreSQL's defaults vacuum a table
when a fifth of it is dead: 12 million dead rows at 60 million kept. Measured in the
soak (docs/benchmarks.md): these settings left a third to a half of the dead rows of
the defaults. Other databases have no such settings: nothing to do there.
"""

from django.db import migrations

AUTOVACUUM = (
    "autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, "
    "autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02, "
    "autovacuum_vacuum_cost_delay = 0"
)
DEFAULTS = (
    "autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, "
    "autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor, "
    "autovacuum_vacuum_cost_delay"
)


def _on_postgresql(sql: str):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("millrace_django", "0008_recurring_verbose_name"),
    ]

    operations = [
        migrations.RunPython(
            _on_postgresql(f"ALTER TABLE millrace_job SET ({AUTOVACUUM})"),
            _on_postgresql(f"ALTER TABLE millrace_job RESET ({DEFAULTS})"),
        ),
    ]
