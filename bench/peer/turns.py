"""django-ai-assistant's turn, in-process, timed: the peer of bench/compare.py.

Run with the peer's own virtualenv (bench/peer/README.md), not toolchat's.
Sets up its Django project on a fresh SQLite file, then reads commands on
standard input, one per line, and answers each with one line of JSON:

- `turn <text>`: a new thread (stored), then `assistant.run(text, thread_id=...)`
  against the scripted model at PEER_LLM_URL; answers {"ms": ..., "answer": ...}
  (the thread's creation is not timed, as compare.py's fresh conversation is not).
"""

import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
folder = Path(tempfile.mkdtemp(prefix="toolchat-peer-"))
os.environ.setdefault("PEER_DATABASE", str(folder / "peer.sqlite3"))
os.environ["DJANGO_SETTINGS_MODULE"] = "settings"

import django  # noqa: E402

django.setup()

from assistant import CalculatorAssistant  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django_ai_assistant.models import Thread  # noqa: E402


def main() -> None:
    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench")
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command, _, text = line.rstrip("\n").partition(" ")
        if command != "turn":
            print(json.dumps({"error": f"unknown command {command!r}"}), flush=True)
            continue
        thread = Thread.objects.create(
            name="bench", created_by=user, assistant_id=CalculatorAssistant.id
        )
        started = time.perf_counter()
        answer = CalculatorAssistant(user=user).run(text, thread_id=thread.id)
        elapsed = (time.perf_counter() - started) * 1000
        print(json.dumps({"ms": elapsed, "answer": answer}), flush=True)


if __name__ == "__main__":
    main()
