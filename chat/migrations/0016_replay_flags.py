# A replay's model calls and tool calls say so themselves (`replay`), and the audit's
# covering indexes carry it (and Run's `replay_of`), so that the statistics of real
# traffic leave replays out from the index alone. Rows stored before are marked from
# their run.

from django.db import migrations, models


def replays_mark(apps, schema_editor):
    for name in ("ModelCall", "ToolExecution"):
        model = apps.get_model("chat", name)
        model.objects.filter(run__replay_of__isnull=False).update(replay=True)


class Migration(migrations.Migration):
    dependencies = [("chat", "0015_replays")]

    operations = [
        migrations.AddField(
            model_name="modelcall",
            name="replay",
            field=models.BooleanField(default=False, editable=False),
        ),
        migrations.AddField(
            model_name="toolexecution",
            name="replay",
            field=models.BooleanField(default=False, editable=False),
        ),
        migrations.RunPython(replays_mark, migrations.RunPython.noop, elidable=True),
        migrations.RemoveIndex(model_name="modelcall", name="modelcall_started_stats"),
        migrations.RemoveIndex(model_name="run", name="run_created_stats"),
        migrations.RemoveIndex(model_name="toolexecution", name="toolexec_created_stats"),
        migrations.AddIndex(
            model_name="modelcall",
            index=models.Index(
                fields=["started_at"],
                include=(
                    "provider",
                    "model",
                    "status",
                    "latency_ms",
                    "first_token_ms",
                    "prompt_tokens",
                    "completion_tokens",
                    "replay",
                ),
                name="modelcall_started_stats",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                fields=["created_at"],
                include=("status", "latency_ms", "model_calls", "replay_of", "id"),
                name="run_created_stats",
            ),
        ),
        migrations.AddIndex(
            model_name="toolexecution",
            index=models.Index(
                fields=["created_at"],
                include=("name", "status", "duration_ms", "truncated", "replay"),
                name="toolexec_created_stats",
            ),
        ),
    ]
