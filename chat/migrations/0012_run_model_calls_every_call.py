"""Run.model_calls counts every model call of the run (docs/audit.md).

Runs stored before counted only the answered calls of their steps: the
follow-ups call and failed or stopped calls were left out, while the audit
counted them. Their counters are set to their ModelCall rows, in one UPDATE
(a run with no rows, older than the rows themselves, keeps its count).
"""

from django.db import migrations
from django.db.models import Count, Exists, IntegerField, OuterRef, Subquery


def count_every_call(apps, schema_editor):
    Run = apps.get_model("chat", "Run")
    ModelCall = apps.get_model("chat", "ModelCall")
    calls = (
        ModelCall.objects.filter(run=OuterRef("pk"))
        .order_by()
        .values("run")
        .annotate(n=Count("pk"))
        .values("n")
    )
    # A run older than its calls' rows (before migration 0005) keeps the count it has.
    recorded = Exists(ModelCall.objects.filter(run=OuterRef("pk")))
    Run.objects.filter(recorded).update(model_calls=Subquery(calls, output_field=IntegerField()))


class Migration(migrations.Migration):
    dependencies = [("chat", "0011_remove_toolexecution_task_id")]

    operations = [migrations.RunPython(count_every_call, migrations.RunPython.noop, elidable=True)]
