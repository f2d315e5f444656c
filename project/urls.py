"""Top-level URLs: the chat UI, auth pages, the REST API, the admin, the health and readiness checks and the metrics."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from chat.telemetry.endpoint import metrics_view
from chat.views import healthz, readyz

urlpatterns = [
    path("", include("chat.urls")),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include("chat.api.urls")),
    path("v1/", include("chat.openai_api.urls")),
    path("admin/", admin.site.urls),
    path("healthz/", healthz, name="healthz"),
    path("readyz/", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
]

# A page that fails because the database is unreachable says so, with a 503.
handler500 = "chat.views.server_error"
