"""Admin registrations (the latency and audit views grow with the admin issue)."""

from django.contrib import admin

from chat.models import Conversation, Message, ModelCall, Run, RunEvent, ToolExecution

admin.site.register([Conversation, Message, Run, ModelCall, ToolExecution, RunEvent])
