"""millrace_limit keyed by an id with its scope unique, instead of the scope as primary
key (Django's mysql.W003 warns of a unique field over 255 characters on MariaDB in every
project). The rows only hold recent start times, forgotten when idle: the table is made
again, a rate's window starting afresh."""

from django.db import migrations, models

import millrace_django.dbschema


class Migration(migrations.Migration):
    dependencies = [
        ("millrace_django", "0019_job_started_at_and_run_minutes"),
    ]

    operations = [
        migrations.DeleteModel(name="Limit"),
        migrations.CreateModel(
            name="Limit",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("scope", millrace_django.dbschema.ExactCharField(max_length=720)),
                (
                    "starts",
                    models.JSONField(default=list, help_text="Start times (epoch microseconds)."),
                ),
                (
                    "updated_at",
                    models.DateTimeField(help_text="Its creation, then its latest start."),
                ),
            ],
            options={
                "db_table": "millrace_limit",
                "indexes": [models.Index(fields=["updated_at"], name="millrace_limit_idle")],
                "constraints": [
                    models.UniqueConstraint(fields=("scope",), name="millrace_limit_scope")
                ],
            },
        ),
    ]
