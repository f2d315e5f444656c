from django.db import migrations, models
from django.db.models import Exists, OuterRef, Q


def sources_fill(apps, schema_editor):
    """Conversations made before they kept a source: a /v1 client's, or the chat page's.

    A /v1 conversation is told by what only /v1 writes (a client digest or name, or
    a run with the client's options); the others cannot tell the chat page from
    the REST API, and are taken as the chat page's, where they were shown.
    """
    conversation = apps.get_model("chat", "Conversation")
    run = apps.get_model("chat", "Run")
    by_client = run.objects.filter(conversation_id=OuterRef("pk"), client_options__isnull=False)
    v1 = Q(Exists(by_client)) | ~Q(client_digest="") | ~Q(client_ref="")
    conversation.objects.filter(v1).update(source="v1")
    conversation.objects.exclude(v1).update(source="chat")


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0024_budgets"),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="source",
            field=models.CharField(
                choices=[
                    ("chat", "Chat page"),
                    ("api", "REST API"),
                    ("v1", "OpenAI-compatible API"),
                    ("task", "A /v1 client's background task"),
                ],
                default="api",
                editable=False,
                max_length=8,
            ),
        ),
        migrations.RunPython(sources_fill, migrations.RunPython.noop),
    ]
