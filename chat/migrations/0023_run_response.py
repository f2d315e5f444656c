from django.db import migrations

import tools.fields


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0022_costs"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="response",
            field=tools.fields.StorableJSONField(blank=True, editable=False, null=True),
        ),
    ]
