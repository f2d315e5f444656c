"""A user message's images stored: one Resource each, and what the message keeps of them."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from chat.images import IMAGE_KIND, ImageInput, image_entry, image_resource_data, image_title
from tools.models import Resource


def images_store(*, owner_id: Any, images: Sequence[ImageInput]) -> list[dict[str, Any]] | None:
    """Store each image as its owner's `image` Resource; the entries `Message.images` keeps.

    None for no image (the column stays NULL). Called inside the transaction
    that stores the message, so that a message and its images are stored together.
    """
    if not images:
        return None
    resources = [
        Resource(
            id=uuid.uuid4(),
            kind=IMAGE_KIND,
            owner_id=owner_id,
            title=image_title(image),
            data=image_resource_data(image),
        )
        for image in images
    ]
    Resource.objects.bulk_create(resources)
    return [
        image_entry(image, str(resource.pk))
        for image, resource in zip(images, resources, strict=True)
    ]
