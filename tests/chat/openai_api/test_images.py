"""Images in user messages through /v1, in-process: read, checked, stored, sent, refused.

Chat Completions' `image_url` parts and Responses' `input_image` parts are
stored with the message (an `image` resource each, the facts on the message),
sent to the model as `image_url` parts on every later call of the
conversation, and anything a model could not be sent is a 400 that names the
part, with nothing stored. The real clients' side is in test_images_clients.py.
"""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from chat.models import Conversation, Message, ModelCall, Run
from tests.chat.api.conftest import token_client
from tests.factories import UserFactory
from tests.llm_server import error_reply, text_reply
from tools.models import Resource

MODEL = "openai/test-model"
URL = "/v1/chat/completions"


def png(width: int = 64, height: int = 48) -> bytes:
    """A real PNG of one colour, `width`x`height` pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def image_part(url: str, detail: str | None = None) -> dict:
    image = {"url": url} | ({"detail": detail} if detail else {})
    return {"type": "image_url", "image_url": image}


def asked(text: str, *parts: dict) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}, *parts]}


def post(client, messages, **fields):
    return client.post(URL, {"model": MODEL, "messages": messages} | fields, format="json")


def error_of(response):
    body = response.json()
    assert set(body) == {"error"}, body
    return body["error"]


@pytest.mark.django_db(transaction=True)
def test_an_image_is_stored_with_its_message_and_sent_on_every_later_call(v1, user, llm_server):
    picture = png(64, 48)
    llm_server.push(text_reply("A red square."), text_reply("Still red."))
    first = [asked("What is this?", image_part(data_url(picture), "low"))]
    response = post(v1, first)
    assert response.status_code == 200, response.json()
    sent = llm_server.requests[0]["messages"][-1]
    assert sent == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": data_url(picture), "detail": "low"}},
        ],
    }
    message = Message.objects.get(role="user")
    (entry,) = message.images
    assert entry | {"resource_id": None} == {
        "resource_id": None,
        "media_type": "image/png",
        "bytes": len(picture),
        "width": 64,
        "height": 48,
        "detail": "low",
    }
    resource = Resource.objects.get(pk=entry["resource_id"])
    assert (resource.kind, resource.owner, resource.title) == ("image", user, "image/png, 64x48")
    assert base64.b64decode(resource.data["data"]) == picture

    # The client resends the history: the same conversation, the image sent again.
    follow = [*first, {"role": "assistant", "content": "A red square."}, asked("And now?")]
    response = post(v1, follow)
    assert response.status_code == 200, response.json()
    assert Conversation.objects.count() == 1
    assert Resource.objects.count() == 1
    again = llm_server.requests[1]["messages"]
    assert again[-3]["content"][1]["image_url"]["url"] == data_url(picture)
    assert again[-1] == {"role": "user", "content": "And now?"}
    listed = token_client(user).get(f"/api/v1/conversations/{message.conversation_id}/messages/")
    shown = listed.json()["results"][0]
    assert (shown["content"], shown["images"]) == ("What is this?", message.images)


@pytest.mark.django_db(transaction=True)
def test_an_https_image_is_sent_as_its_url_and_an_image_alone_is_a_message(v1, llm_server):
    llm_server.push(text_reply("A cat."))
    url = "https://images.example.com/cat.jpg?size=large"
    response = post(v1, [{"role": "user", "content": [image_part(url)]}])
    assert response.status_code == 200, response.json()
    assert llm_server.requests[0]["messages"][-1]["content"] == [
        {"type": "image_url", "image_url": {"url": url}}
    ]
    (entry,) = Message.objects.get(role="user").images
    assert (entry["url"], entry["detail"]) == (url, None)
    assert Resource.objects.get().data == {"url": url, "detail": None}


@pytest.mark.django_db(transaction=True)
def test_responses_input_image_parts_reach_the_model_as_image_url_parts(v1, llm_server):
    picture = png(8, 8)
    llm_server.push(text_reply("Tiny."))
    content = [
        {"type": "input_text", "text": "Size?"},
        {"type": "input_image", "image_url": data_url(picture), "detail": "high"},
    ]
    response = v1.post(
        "/v1/responses",
        {"model": MODEL, "input": [{"role": "user", "content": content}]},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert response.json()["output"][-1]["content"][0]["text"] == "Tiny."
    assert llm_server.requests[0]["messages"][-1]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": data_url(picture), "detail": "high"},
    }


GIF = b"GIF89a\x02\x00\x03\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x00\x00\x00\x00\x00,\x00\x00\x00\x00\x02\x00\x03\x00\x00\x02\x02D\x01\x00;"


@pytest.mark.parametrize(
    ("part", "field", "words"),
    [
        (image_part("data:image/png;base64,not*base64"), ".image_url.url", "not valid base64"),
        (image_part(data_url(b"plain text, no image")), ".image_url.url", "not a PNG"),
        (image_part(data_url(GIF, "text/plain")), ".image_url.url", "not an image type"),
        (image_part("data:image/png," + "A" * 8), ".image_url.url", "base64"),
        (image_part("http://example.com/a.png"), ".image_url.url", "https"),
        (image_part("file:///etc/passwd"), ".image_url.url", "https"),
        (image_part("https://example.com/a\x00.png"), ".image_url.url", "NUL"),
        (image_part("https://example.com/a b.png"), ".image_url.url", "spaces"),
        # The model's server fetches the URL from where it runs: never an address of a
        # private network, of its own host or of a cloud's metadata, nor a password.
        (image_part("https://10.0.0.5/admin.png"), ".image_url.url", "public"),
        (image_part("https://169.254.169.254/latest/meta-data"), ".image_url.url", "public"),
        (image_part("https://[::1]/a.png"), ".image_url.url", "public"),
        (image_part("https://localhost/a.png"), ".image_url.url", "public"),
        (image_part("https://metadata.google.internal/a.png"), ".image_url.url", "public"),
        (image_part("https://2130706433/a.png"), ".image_url.url", "public"),
        (image_part("https://127.1/a.png"), ".image_url.url", "public"),
        (image_part("https://user:secret@example.com/a.png"), ".image_url.url", "password"),
        ({"type": "image_url", "image_url": {"url": 7}}, ".image_url.url", "a string"),
        ({"type": "image_url", "image_url": 7}, ".image_url", "an object"),
        (image_part(data_url(GIF), "huge"), ".image_url.detail", "auto, low, high"),
        ({"type": "input_audio", "input_audio": {}}, "", "text and image parts"),
    ],
)
@pytest.mark.django_db
def test_a_bad_image_is_a_400_naming_it_and_nothing_is_stored(v1, llm_server, part, field, words):
    response = post(v1, [asked("Look", part)])
    assert response.status_code == 400, response.json()
    error = error_of(response)
    assert error["param"] == f"messages[0].content[1]{field}"
    assert words in error["message"]
    assert not Conversation.objects.exists()
    assert not Resource.objects.exists()
    assert not llm_server.requests


@pytest.mark.django_db
def test_an_image_over_the_limits_is_a_400_and_nothing_is_stored(v1, llm_server, settings):
    settings.TOOLCHAT_IMAGE_MAX_BYTES = 1000
    response = post(v1, [asked("Look", image_part(data_url(png(200, 200) + b"\x00" * 2000)))])
    assert response.status_code == 400
    assert "the limit is 1,000 (TOOLCHAT_IMAGE_MAX_BYTES)" in error_of(response)["message"]
    settings.TOOLCHAT_IMAGE_MAX_COUNT = 2
    response = post(v1, [asked("Look", *[image_part(data_url(GIF))] * 3)])
    assert response.status_code == 400
    error = error_of(response)
    assert (error["param"], "at most 2" in error["message"]) == ("messages[0].content", True)
    assert not Conversation.objects.exists()
    assert not Resource.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["system", "assistant"])
def test_an_image_in_a_message_not_the_users_is_refused(v1, llm_server, role):
    messages = [
        {"role": role, "content": [{"type": "text", "text": "x"}, image_part(data_url(GIF))]},
        {"role": "user", "content": "hi"},
    ]
    response = post(v1, messages)
    assert response.status_code == 400
    assert error_of(response)["param"] == "messages[0].content[1]"
    assert not Conversation.objects.exists()


# --- a model that refuses images ----------------------------------------------------------

REFUSAL = "Invalid content type. image_url is only supported by certain models."


@pytest.mark.django_db(transaction=True)
def test_a_model_that_refuses_images_is_a_400_naming_it_and_is_remembered(v1, llm_server):
    llm_server.push(error_reply(400, REFUSAL))
    question = [asked("What is this?", image_part(data_url(png())))]
    response = post(v1, question)
    assert response.status_code == 400, response.json()
    error = error_of(response)
    assert error["code"] == "model_refuses_images"
    assert error["message"].startswith(f"The model {MODEL} does not accept images")
    assert REFUSAL in error["message"]
    assert len(llm_server.requests) == 1
    stored = (Message.objects.count(), Run.objects.count(), Resource.objects.count())

    # Known now: refused at once, with nothing stored and no model call.
    for body in (question, [asked("Another", image_part("https://example.com/a.png"))]):
        response = post(v1, body)
        assert response.status_code == 400
        assert error_of(response)["code"] == "model_refuses_images"
        assert error_of(response)["param"] == "messages"
    content = [{"type": "input_image", "image_url": data_url(png())}]
    response = v1.post(
        "/v1/responses",
        {"model": MODEL, "input": [{"role": "user", "content": content}]},
        format="json",
    )
    assert response.status_code == 400
    assert (error_of(response)["code"], error_of(response)["param"]) == (
        "model_refuses_images",
        "input",
    )
    assert (Message.objects.count(), Run.objects.count(), Resource.objects.count()) == stored
    assert len(llm_server.requests) == 1
    assert ModelCall.objects.count() == 1

    # Text still goes; an earlier image of the history is told in words.
    llm_server.push(text_reply("I cannot see images, sorry."))
    follow = [*question, {"role": "assistant", "content": "?"}, asked("Then just say hi")]
    response = post(v1, follow)
    assert response.status_code == 200, response.json()
    sent = llm_server.requests[-1]["messages"]
    assert {"type": "text", "text": "[an image this model cannot be shown]"} in sent[-3]["content"]
    assert not any(
        part.get("type") == "image_url"
        for message in sent
        if isinstance(message["content"], list)
        for part in message["content"]
    )


@pytest.mark.django_db(transaction=True)
def test_an_error_about_the_image_itself_does_not_mark_the_model(v1, llm_server):
    llm_server.push(error_reply(400, "Image too large: the image exceeds the limit of 20 MB."))
    response = post(v1, [asked("What is this?", image_part(data_url(png())))])
    assert response.status_code == 502
    llm_server.push(text_reply("A square."))
    response = post(v1, [asked("And this one?", image_part(data_url(png(4, 4))))])
    assert response.status_code == 200, response.json()


# --- the offline model -------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_offline_model_says_what_it_was_shown(v1):
    jpeg = bytes.fromhex("ffd8ffe000104a46494600010100000100010000ffc0000b080020002801011100")
    content = [
        {"type": "text", "text": "hello"},
        image_part(data_url(png(64, 48))),
        image_part(data_url(jpeg, "image/jpeg")),
        image_part("https://images.example.com/cat.jpg"),
    ]
    response = post(v1, [{"role": "user", "content": content}], model="offline/offline")
    assert response.status_code == 200, response.json()
    answer = response.json()["choices"][0]["message"]["content"]
    assert answer.startswith(
        "I see 3 images (image/png, 64x48; image/jpeg, 40x32; "
        "at images.example.com, not fetched). Hello!"
    )


# --- the audit ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_audit_and_the_admin_show_a_messages_images_escaped_and_fetch_none(
    v1, llm_server, client
):
    picture = png(12, 6)
    hostile = 'https://example.com/a.png?x="><script>alert(1)</script>'
    llm_server.push(text_reply("Two."))
    response = post(
        v1, [asked("Which?", image_part(data_url(picture), "low"), image_part(hostile))]
    )
    assert response.status_code == 200, response.json()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    run = Run.objects.get()
    html = client.get(f"/audit/runs/{run.pk}/").content.decode()
    assert f'<img class="thumbnail" src="{data_url(picture)}"' in html
    assert "image/png, 12x6, " in html
    assert "detail low" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)" not in html
    assert 'src="https://example.com' not in html
    message = Message.objects.get(role="user")
    admin = client.get(f"/admin/chat/message/{message.pk}/change/").content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in admin
    assert "<script>alert(1)" not in admin
    for entry in message.images:
        assert f"/admin/tools/resource/{entry['resource_id']}/change/" in admin


# --- the REST post (and the socket, which takes the same fields) ---------------------------


@pytest.mark.django_db(transaction=True)
def test_the_rest_post_takes_images_and_refuses_bad_ones_storing_nothing(user, llm_server):
    api = token_client(user)
    conversation = api.post("/api/v1/conversations/", {}, format="json").json()
    url = f"/api/v1/conversations/{conversation['id']}/messages/"
    bad = [
        ({"content": "Look", "images": ["http://example.com/a.png"]}, "https"),
        ({"content": "Look", "images": [{"url": data_url(b"no image")}]}, "not a PNG"),
        ({"content": "Look", "images": "data:image/png;base64,AAAA"}, "array"),
        ({"content": ""}, "may not be blank"),
        ({"content": " ", "images": []}, "empty"),
    ]
    for body, words in bad:
        response = api.post(url, body, format="json")
        assert response.status_code == 400, response.json()
        assert words in response.json()["message"]
    assert not Message.objects.exists()
    assert not Resource.objects.exists()

    llm_server.push(text_reply("A square."))
    picture = png(10, 10)
    response = api.post(
        f"{url}?wait=true", {"content": "", "images": [{"url": data_url(picture)}]}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert llm_server.requests[0]["messages"][-1]["content"] == [
        {"type": "image_url", "image_url": {"url": data_url(picture)}}
    ]
    (shown,) = [m for m in api.get(url).json()["results"] if m["role"] == "user"]
    assert (shown["content"], shown["images"][0]["width"]) == ("", 10)
    resource = api.get(f"/api/v1/resources/{shown['images'][0]['resource_id']}/").json()
    assert base64.b64decode(resource["data"]["data"]) == picture
    other = token_client(UserFactory())
    assert other.get(f"/api/v1/resources/{shown['images'][0]['resource_id']}/").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_a_new_conversations_past_keeps_its_images(v1, llm_server):
    """A client's history toolchat has not seen: its earlier images are stored and sent too."""
    earlier, later = png(3, 3), png(5, 5)
    llm_server.push(text_reply("Both squares."))
    messages = [
        asked("First", image_part(data_url(earlier))),
        {"role": "assistant", "content": "A dot."},
        asked("Second", image_part("https://example.com/b.png"), image_part(data_url(later))),
    ]
    response = post(v1, messages)
    assert response.status_code == 200, response.json()
    sent = [m for m in llm_server.requests[0]["messages"] if m["role"] == "user"]
    assert [[p.get("image_url", {}).get("url") for p in m["content"]] for m in sent] == [
        [None, data_url(earlier)],
        [None, "https://example.com/b.png", data_url(later)],
    ]
    stored = Message.objects.filter(role="user").order_by("position")
    assert [len(m.images) for m in stored] == [1, 2]
    assert Resource.objects.filter(kind="image").count() == 3


@pytest.mark.django_db(transaction=True)
def test_the_open_responses_compliance_image_case_completes_on_the_offline_model(v1):
    """Its shape: a message item, input_text then an input_image of a 32x32 PNG, no detail."""
    content = [
        {"type": "input_text", "text": "What do you see in this image? Answer in one sentence."},
        {"type": "input_image", "image_url": data_url(png(32, 32))},
    ]
    response = v1.post(
        "/v1/responses",
        {
            "model": "offline/offline",
            "input": [{"type": "message", "role": "user", "content": content}],
        },
        format="json",
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "completed"
    (message,) = [item for item in body["output"] if item["type"] == "message"]
    assert message["content"][0]["text"].startswith("I see 1 image (image/png, 32x32).")


@pytest.mark.django_db(transaction=True)
def test_a_history_sends_its_newest_images_and_says_the_older_in_words(v1, llm_server, settings):
    """However many images a conversation gathers, a model call carries the newest few."""
    settings.TOOLCHAT_HISTORY_MAX_IMAGES = 2
    first, second, third = png(1, 1), png(2, 2), png(3, 3)
    llm_server.push(text_reply("Three squares."))
    messages = [
        asked("One", image_part(data_url(first))),
        {"role": "assistant", "content": "A dot."},
        asked("Two", image_part(data_url(second))),
        {"role": "assistant", "content": "A bigger dot."},
        asked("Three", image_part(data_url(third))),
    ]
    response = post(v1, messages)
    assert response.status_code == 200, response.json()
    sent = [m["content"] for m in llm_server.requests[0]["messages"] if m["role"] == "user"]
    assert sent[0] == [
        {"type": "text", "text": "One"},
        {"type": "text", "text": "[an earlier image, left out of this request]"},
    ]
    assert [part["image_url"]["url"] for part in sent[1][1:] + sent[2][1:]] == [
        data_url(second),
        data_url(third),
    ]
    assert Resource.objects.filter(kind="image").count() == 3  # all kept, for the record
