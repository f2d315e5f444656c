"""factory_boy factories for toolchat's models."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from chat.models import Conversation, Message, Role, Run
from tools.models import Resource


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password("correct horse battery staple")


class ConversationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Conversation

    owner = factory.SubFactory(UserFactory)
    title = factory.Sequence(lambda n: f"Conversation {n}")


class RunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Run

    conversation = factory.SubFactory(ConversationFactory)
    mode = factory.SelfAttribute("conversation.mode")


class MessageFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Message

    conversation = factory.SubFactory(ConversationFactory)
    position = factory.Sequence(lambda n: n)
    role = Role.USER
    content = factory.Faker("sentence")


class ResourceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Resource

    kind = "note"
    owner = factory.SubFactory(UserFactory)
    title = factory.Sequence(lambda n: f"Note {n}")
    data = factory.LazyAttribute(lambda r: {"title": r.title, "body": ""})
