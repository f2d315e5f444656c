"""The garbage collector's full passes, kept to the objects a process made after its start.

CPython's cyclic collector runs a full pass over every object it tracks once
the objects that survived its younger passes since the last full one reach a
quarter of those it already holds. A started web process or worker holds
150,000 to 200,000 (Django, DRF, Channels, Celery, and the openai SDK's
types, which its client loads on its first request), and a full pass over
them took 50 to 100 ms with the GIL held: every thread of the process, the event loop
that streams deltas to the sockets included, stops meanwhile.

Short turns leave few survivors, and such a pass came once or twice in
600 turns. A turn with a long history keeps its 400 messages alive across
several young passes: at 1,000 stored messages one full pass came every 40
turns, 2 ms a turn on average (docs/performance.md, round ten).

`collector_freeze` is called once a process has loaded what it serves with
(the end of project/asgi.py; a Celery worker when it is ready, and each pool
process it forks): it imports the modules a first model request would load,
collects what start-up left behind, then moves every object left into the
collector's permanent generation (`gc.freeze`), which no pass walks. Those
objects are still freed when nothing refers to them; only a cycle among them
would outlive its use, and a process's modules, settings and registries are
meant to. Full passes then walk only what the process made since, a few
milliseconds. `TOOLCHAT_GC_FREEZE=0` turns it off.
"""

from __future__ import annotations

import gc
import logging
from importlib import import_module

from django.conf import settings

logger = logging.getLogger(__name__)

# What an openai client loads on its first streamed chat request, not on import:
# about 500 modules and 50,000 tracked objects.
LAZY_MODULES = (
    "openai.resources.chat.completions",
    "openai.types.chat",
    "openai.lib.streaming.chat",
)


def collector_freeze() -> int:
    """Load the lazy modules, collect, and freeze every tracked object; how many are frozen."""
    if not settings.TOOLCHAT_GC_FREEZE:
        return 0
    for name in LAZY_MODULES:
        import_module(name)
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.info(
        "%d objects loaded at start are left out of the garbage collector's full passes "
        "(TOOLCHAT_GC_FREEZE)",
        frozen,
    )
    return frozen
