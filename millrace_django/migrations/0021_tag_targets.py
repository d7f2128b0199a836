"""millrace_tag_target: the (tag, function) pairs jobs were stored with, so that the job
catalog lists a tag's functions without reading their jobs; filled from the tagged jobs
already stored."""

from django.db import migrations, models

import millrace_django.dbschema


def pair_existing_tags(apps, schema_editor):
    """Record the (tag, target) pairs of the tagged jobs stored before this table."""
    alias = schema_editor.connection.alias
    job_tag = apps.get_model("millrace_django", "JobTag")
    tag_target = apps.get_model("millrace_django", "TagTarget")
    pairs = job_tag.objects.using(alias).values_list("tag", "job__target").distinct()
    tag_target.objects.using(alias).bulk_create(
        [tag_target(tag=tag, target=target) for tag, target in pairs]
    )


class Migration(migrations.Migration):
    dependencies = [
        ("millrace_django", "0020_limit_scope_unique"),
    ]

    operations = [
        migrations.CreateModel(
            name="TagTarget",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("tag", millrace_django.dbschema.ExactCharField(max_length=64)),
                ("target", millrace_django.dbschema.ExactCharField(max_length=500)),
            ],
            options={
                "db_table": "millrace_tag_target",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tag", "target"), name="millrace_tag_target_once"
                    )
                ],
            },
        ),
        migrations.RunPython(pair_existing_tags, migrations.RunPython.noop, elidable=True),
    ]
