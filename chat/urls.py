from django.urls import path

from chat import views
from chat.audit.views import audit_run_detail, audit_run_list

app_name = "chat"

urlpatterns = [
    path("", views.index, name="index"),
    path("audit/", audit_run_list, name="audit_runs"),
    path("audit/runs/<uuid:run_id>/", audit_run_detail, name="audit_run"),
]
