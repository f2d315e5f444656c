# A recorded call is served once per replay: the database refuses a second row of a
# replay naming the same recorded call, so equal calls running at once cannot share it.
# A replay stored before that was served one call twice keeps its first link only.

from django.db import migrations, models
from django.db.models import Count


def links_unshare(apps, schema_editor):
    ToolExecution = apps.get_model("chat", "ToolExecution")
    shared = (
        ToolExecution.objects.filter(replayed_from__isnull=False)
        .values("run_id", "replayed_from_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    for pair in shared:
        rows = ToolExecution.objects.filter(
            run_id=pair["run_id"], replayed_from_id=pair["replayed_from_id"]
        ).order_by("created_at", "tool_call_id")
        first = rows.values_list("pk", flat=True)[0]
        rows.exclude(pk=first).update(replayed_from=None)


class Migration(migrations.Migration):
    dependencies = [("chat", "0016_replay_flags")]

    operations = [
        migrations.RunPython(links_unshare, migrations.RunPython.noop, elidable=True),
        migrations.AddConstraint(
            model_name="toolexecution",
            constraint=models.UniqueConstraint(
                condition=models.Q(("replayed_from__isnull", False)),
                fields=("run", "replayed_from"),
                name="toolexec_replayed_once",
            ),
        ),
    ]
