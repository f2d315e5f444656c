"""Images sent by the openai SDK, as its users send them, to toolchat on a real uvicorn.

`chat.completions.create` with `image_url` parts and `responses.create` with
`input_image` parts: the embedded offline model says what it was shown; the
scripted model server receives the image as an `image_url` part on this call
and the conversation's later ones; a model server that refuses images makes
the SDK raise a 400 naming the model, and the next image is refused without
a model call.
"""

from __future__ import annotations

import openai
import pytest
from openai import OpenAI
from rest_framework.authtoken.models import Token

from chat.models import Conversation, Message
from tests.chat.openai_api.test_images import data_url, png
from tests.factories import UserFactory
from tests.llm_server import error_reply, text_reply
from tools.models import Resource

pytestmark = pytest.mark.postgres


def _client(base_url: str) -> tuple[OpenAI, object]:
    user = UserFactory()
    key = Token.objects.create(user=user).key
    return OpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0), user


def test_the_offline_model_says_what_the_sdk_showed_it(asgi_server):
    client, _ = _client(asgi_server)
    picture = data_url(png(32, 16))
    completion = client.chat.completions.create(
        model="offline/offline",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Hello, what is this?"},
                    {"type": "image_url", "image_url": {"url": picture, "detail": "low"}},
                ],
            }
        ],
    )
    assert completion.choices[0].message.content.startswith(
        "I see 1 image (image/png, 32x16). Hello!"
    )
    streamed = client.chat.completions.create(
        model="offline/offline",
        stream=True,
        messages=[
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": picture}}],
            }
        ],
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
    assert text.startswith("I see 1 image (image/png, 32x16).")
    response = client.responses.create(
        model="offline/offline",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "hi"},
                    {"type": "input_image", "image_url": picture, "detail": "auto"},
                    {"type": "input_image", "image_url": "https://images.example.com/b.png"},
                ],
            }
        ],
    )
    assert response.output_text.startswith(
        "I see 2 images (image/png, 32x16; at images.example.com, not fetched)."
    )


def test_the_model_is_sent_the_sdks_image_on_every_later_call(scripted_server, llm_server):
    client, user = _client(scripted_server)
    picture = data_url(png(20, 10))
    llm_server.push(text_reply("A red band."), text_reply("Wider than tall."))
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": picture}},
            ],
        }
    ]
    first = client.chat.completions.create(model="openai/test-model", messages=messages)
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Is it wide?"},
    ]
    second = client.chat.completions.create(model="openai/test-model", messages=messages)
    assert second.choices[0].message.content == "Wider than tall."
    for request in llm_server.requests:
        (question,) = [m for m in request["messages"] if m["role"] == "user"][:1]
        assert question["content"] == [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": picture}},
        ]
    (conversation,) = Conversation.objects.filter(owner=user)
    (entry,) = Message.objects.get(conversation=conversation, position=0).images
    assert (entry["media_type"], entry["width"], entry["height"]) == ("image/png", 20, 10)
    assert Resource.objects.filter(owner=user, kind="image").count() == 1


def test_a_model_that_refuses_images_is_an_sdk_400_naming_it(scripted_server, llm_server):
    client, _ = _client(scripted_server)
    llm_server.push(
        error_reply(400, "Invalid content type. image_url is only supported by certain models.")
    )
    image = {"type": "input_image", "image_url": data_url(png())}
    ask = [{"role": "user", "content": [{"type": "input_text", "text": "What?"}, image]}]
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="openai/test-model", input=ask)
    assert refused.value.status_code == 400
    assert "The model openai/test-model does not accept images" in refused.value.message
    with pytest.raises(openai.BadRequestError) as again:
        client.chat.completions.create(
            model="openai/test-model",
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": data_url(png())}}],
                }
            ],
        )
    assert again.value.code == "model_refuses_images"
    assert len(llm_server.requests) == 1
