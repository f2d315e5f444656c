from django.urls import path

from chat import views
from chat.audit import views as audit

app_name = "chat"

urlpatterns = [
    path("", views.index, name="index"),
    path("audit/", audit.audit_overview, name="audit_runs"),
    path("audit/tools.csv", audit.audit_tools_csv, name="audit_tools_csv"),
    path(
        "audit/tool-decisions.csv",
        audit.audit_tool_decisions_csv,
        name="audit_tool_decisions_csv",
    ),
    path("audit/models.csv", audit.audit_models_csv, name="audit_models_csv"),
    path("audit/people.csv", audit.audit_people_csv, name="audit_people_csv"),
    path("audit/replays/", audit.audit_replays, name="audit_replays"),
    path("audit/replays/start/", audit.audit_replays_start, name="audit_replays_start"),
    path("audit/replays.csv", audit.audit_replays_csv, name="audit_replays_csv"),
    path("audit/runs/<uuid:run_id>/", audit.audit_run_detail, name="audit_run"),
    path(
        "audit/runs/<uuid:run_id>/compare/<uuid:other_id>/",
        audit.audit_run_compare,
        name="audit_run_compare",
    ),
    path(
        "audit/conversations/<uuid:conversation_id>/",
        audit.audit_conversation,
        name="audit_conversation",
    ),
]
