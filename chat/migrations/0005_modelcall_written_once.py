# A model call is stored once, when it has ended: no row is "running" any more.
# Rows a stopped deployment left running are failed calls whose worker died.

from django.db import migrations, models


def running_calls_fail(apps, schema_editor):
    ModelCall = apps.get_model("chat", "ModelCall")
    ModelCall.objects.filter(status="running").update(
        status="failed", error="The worker making this call stopped before it finished."
    )


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0004_storable_text"),
    ]

    operations = [
        migrations.RunPython(running_calls_fail, migrations.RunPython.noop, elidable=True),
        migrations.AlterField(
            model_name="modelcall",
            name="status",
            field=models.CharField(
                choices=[("succeeded", "Succeeded"), ("failed", "Failed")], max_length=16
            ),
        ),
    ]
