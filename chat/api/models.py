"""The models a user may choose for a conversation (`TOOLCHAT_PROVIDERS`, docs/providers.md)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.api import docs
from chat.api.base import page_serializer
from chat.llm.endpoints import compose_model_default, default_model, model_choices

TAG = ["models"]


# Built with type(): `label` is also an attribute of every Field, which a class body's
# annotation would clash with (DRF takes the declared fields out of the class).
MODEL_SERIALIZER: type[serializers.Serializer[Any]] = type(
    "ModelSerializer",
    (serializers.Serializer,),
    {
        "__doc__": "A model a conversation may choose.",
        "id": serializers.CharField(
            help_text="`<provider>/<model>`: what a conversation's `model` takes."
        ),
        "provider": serializers.CharField(help_text="The provider's name in TOOLCHAT_PROVIDERS."),
        "model": serializers.CharField(help_text="The model's name on its server."),
        "label": serializers.CharField(help_text="What the chat page's picker shows."),
        "default": serializers.BooleanField(
            help_text="The model of a conversation that names none (LLM_MODEL)."
        ),
        "compose": serializers.BooleanField(
            help_text="Writes every final answer after the tools (LLM_COMPOSE_MODEL)."
        ),
    },
)


class ModelListApi(APIView):
    """The models a conversation may talk to, provider by provider."""

    @extend_schema(
        tags=TAG,
        operation_id="models_list",
        summary="List the models",
        description=(
            "Every model a conversation may choose, in the providers file's order (one page). "
            "A provider whose file gives no `models` is asked its server's `GET /models`; "
            "one that does not answer lists none until it does."
        ),
        responses={200: page_serializer("ModelPageSerializer", MODEL_SERIALIZER), **docs.errors()},
        examples=[
            docs.example(
                "Models",
                {
                    "next": None,
                    "previous": None,
                    "results": [
                        {
                            "id": "openai/gpt-4.1-mini",
                            "provider": "openai",
                            "model": "gpt-4.1-mini",
                            "label": "gpt-4.1-mini · openai",
                            "default": True,
                            "compose": False,
                        },
                        {
                            "id": "local/qwen3",
                            "provider": "local",
                            "model": "qwen3",
                            "label": "qwen3 · local",
                            "default": False,
                            "compose": False,
                        },
                    ],
                },
            )
        ],
    )
    def get(self, request: Request) -> Response:
        """All models offered."""
        default, compose = default_model(), compose_model_default()
        return Response(
            {
                "next": None,
                "previous": None,
                "results": [
                    {
                        "id": choice.id,
                        "provider": choice.provider,
                        "model": choice.model,
                        "label": choice.label,
                        "default": choice.id == default,
                        "compose": choice.id == compose,
                    }
                    for choice in model_choices()
                ],
            }
        )
