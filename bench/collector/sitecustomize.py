"""The garbage collector's full passes, logged by every Python process started with this folder
on PYTHONPATH (bench/history_flat.py --collector); inert unless TOOLCHAT_COLLECTOR_LOG names a file.

Each full pass (generation 2) appends one line: the process id, what the
process is (`worker`, `web` or `other`, from its command line), when the pass
ended (epoch seconds), how long it took in ms, and how many objects the
process had frozen (project/collector.py). Measurement only: two clock reads
a pass.
"""

from __future__ import annotations

import os

if os.environ.get("TOOLCHAT_COLLECTOR_LOG"):
    import gc
    import sys
    import time

    _log = os.environ["TOOLCHAT_COLLECTOR_LOG"]
    _started: list[float] = []

    def _role() -> str:
        # Read at each pass: sys.argv is not yet set while this module is imported.
        command = " ".join(getattr(sys, "argv", []))
        return "worker" if "celery" in command else "web" if "uvicorn" in command else "other"

    def _timed(phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            _started[:] = [time.perf_counter()]
        elif _started:
            ms = (time.perf_counter() - _started[0]) * 1000
            with open(_log, "a") as log:
                line = f"{os.getpid()}\t{_role()}\t{time.time():.6f}\t{ms:.3f}\t{gc.get_freeze_count()}"
                log.write(line + "\n")

    gc.callbacks.append(_timed)
