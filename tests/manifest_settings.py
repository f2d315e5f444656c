"""The test settings with production's static storage: hashed names, imports rewritten."""

from project.settings.test import *  # noqa: F403
from project.settings.test import STORAGES

STORAGES = {
    **STORAGES,
    "staticfiles": {"BACKEND": "project.staticfiles.ManifestStaticFilesStorage"},
}
