import tools.fields
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0026_modelcall_logprobs"),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="client_metadata",
            field=tools.fields.StorableJSONField(blank=True, default=dict, editable=False),
        ),
    ]
