"""The OpenAI-compatible URLs, mounted at /v1/ (DESIGN.md section 7)."""

from __future__ import annotations

from django.urls import path, re_path
from django.views.decorators.csrf import csrf_exempt

from chat.openai_api import conversations, responses, views

app_name = "openai"

urlpatterns = [
    path("models", views.ModelListView.as_view(), name="models"),
    # Any text is an id to look up (a newline too: a JSON 404, not Django's HTML one).
    re_path(r"^models/(?P<model_id>[\s\S]+)$", views.ModelDetailView.as_view(), name="model"),
    path("chat/completions", views.ChatCompletionView.as_view(), name="chat-completions"),
    path("responses", responses.ResponseCreateView.as_view(), name="responses"),
    path("responses/<str:response_id>", responses.ResponseDetailView.as_view(), name="response"),
    path(
        "responses/<str:response_id>/cancel",
        responses.ResponseCancelView.as_view(),
        name="response-cancel",
    ),
    path(
        "responses/<str:response_id>/input_items",
        responses.ResponseInputItemsView.as_view(),
        name="response-input-items",
    ),
    path("conversations", conversations.ConversationCreateView.as_view(), name="conversations"),
    path(
        "conversations/<str:conversation_id>",
        conversations.ConversationDetailView.as_view(),
        name="conversation",
    ),
    path(
        "conversations/<str:conversation_id>/items",
        conversations.ConversationItemsView.as_view(),
        name="conversation-items",
    ),
    path(
        "conversations/<str:conversation_id>/items/<str:item_id>",
        conversations.ConversationItemView.as_view(),
        name="conversation-item",
    ),
    re_path(r"^[\s\S]*$", csrf_exempt(views.not_found)),
]
