"""toolchat's own settings, read from the environment (imported at the end of base.py).

The turn engine's timings and recovery, WebSocket limits, the model
providers, and tools and limits. Each is documented in README.md's
configuration table.
"""

from __future__ import annotations

import ipaddress

from django.core.exceptions import ImproperlyConfigured

from project.settings.env import env_bool, env_float, env_int, env_list, env_str

# --- Metrics (docs/observability.md) ---------------------------------------------------

# GET /metrics is off (404) unless one of these is set: a scraper sends
# `Authorization: Bearer <token>`, or connects from one of the CIDR blocks.
TOOLCHAT_METRICS_TOKEN = env_str("TOOLCHAT_METRICS_TOKEN")
TOOLCHAT_METRICS_NETWORKS = env_list("TOOLCHAT_METRICS_NETWORKS", [])
for _network in TOOLCHAT_METRICS_NETWORKS:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError as _exc:
        raise ImproperlyConfigured(f"TOOLCHAT_METRICS_NETWORKS: {_exc}") from _exc

# --- The turn engine ------------------------------------------------------------------

# Runs and running tool calls renew a heartbeat every TOOLCHAT_HEARTBEAT_S; one
# silent for TOOLCHAT_RUN_STALE_S is presumed dead. With the sweep every
# TOOLCHAT_RECOVER_S, a dead worker's runs move again within STALE + RECOVER
# seconds of its death (docs/turn-engine.md).
TOOLCHAT_RUN_STALE_S = env_float("TOOLCHAT_RUN_STALE_S", 10.0)
TOOLCHAT_HEARTBEAT_S = env_float("TOOLCHAT_HEARTBEAT_S", 3.0)
# While the database is down no worker can renew a heartbeat, so after it
# restarts nobody is presumed dead for this long: a worker that lived through
# the outage stores what it holds (a tool's result) instead of seeing its call
# taken over and run again (docs/deploy.md). PostgreSQL only.
TOOLCHAT_RESTART_GRACE_S = env_float("TOOLCHAT_RESTART_GRACE_S", TOOLCHAT_RUN_STALE_S)
# How often lost runs (stale, or queued and never picked up) are queued again:
# by Celery beat with Redis, by the web process without. 0 turns it off.
TOOLCHAT_RECOVER_S = env_float("TOOLCHAT_RECOVER_S", 5.0)
# A run still queued after TOOLCHAT_RUN_STALE_S has its task sent again, then at
# most once per this many seconds: its task most likely waits in the broker.
TOOLCHAT_RESEND_S = env_float("TOOLCHAT_RESEND_S", 30.0)
# A tool call still marked running this long after its own timeout is presumed
# dead (even if its heartbeat goes on: a hung tool): it is run again if
# idempotent, else reported interrupted. A silent heartbeat finds it sooner.
TOOLCHAT_TOOL_GRACE_S = env_float("TOOLCHAT_TOOL_GRACE_S", 30.0)
# What a tool no tool policy covers may do (docs/governance.md): "tool" keeps the
# tool's own requires_approval; "deny" refuses it, for deployments that list what
# is allowed.
TOOLCHAT_TOOLS_DEFAULT = env_str("TOOLCHAT_TOOLS_DEFAULT", "tool").strip().lower() or "tool"
if TOOLCHAT_TOOLS_DEFAULT not in ("tool", "deny"):
    raise ImproperlyConfigured(
        f'TOOLCHAT_TOOLS_DEFAULT must be "tool" or "deny", not {TOOLCHAT_TOOLS_DEFAULT!r}'
    )
# What a run reserves of its owner's daily and monthly budget while it is in flight,
# in tokens, when no per-run hard limit says (docs/governance.md, "Budgets"): with
# a limit of 100,000 tokens a day, 25 runs at once at most.
TOOLCHAT_BUDGET_RESERVE_TOKENS = env_int("TOOLCHAT_BUDGET_RESERVE_TOKENS", 4000)
# A call that waits for its owner's approval longer than this is rejected ("expired").
TOOL_APPROVAL_TIMEOUT_S = env_float("TOOL_APPROVAL_TIMEOUT_S", 3600.0)
# message.delta events are coalesced to at most one per this many seconds.
TOOLCHAT_DELTA_INTERVAL_S = env_float("TOOLCHAT_DELTA_INTERVAL_S", 0.05)
# A step that asks for one tool call runs it in the run's own worker, with no
# round trip through the queue; several calls of one step always run as tasks,
# concurrently. Off: every call is a task (docs/turn-engine.md).
TOOLCHAT_INLINE_TOOL_CALLS = env_bool("TOOLCHAT_INLINE_TOOL_CALLS", default=True)
# What a web process or worker loaded at its start is left out of the garbage
# collector's full passes (project/collector.py): 50 to 85 ms each otherwise.
TOOLCHAT_GC_FREEZE = env_bool("TOOLCHAT_GC_FREEZE", default=True)

# WebSocket limits: open sockets per user (across the web processes, with Redis:
# chat/live/slots.py), the largest message a client may send, and the interval
# of the server's pings.
TOOLCHAT_WS_MAX_SOCKETS_PER_USER = env_int("TOOLCHAT_WS_MAX_SOCKETS_PER_USER", 20)
TOOLCHAT_WS_MAX_MESSAGE_BYTES = env_int("TOOLCHAT_WS_MAX_MESSAGE_BYTES", 256 * 1024)
TOOLCHAT_WS_PING_S = env_float("TOOLCHAT_WS_PING_S", 20.0)

# --- LLM providers (DESIGN.md section 6) ---------------------------------------------

# Several named endpoints: a JSON file (docs/providers.md, chat/llm/endpoints.py).
# Without it the variables below make one provider, `openai` (or `offline`).
TOOLCHAT_PROVIDERS = env_str("TOOLCHAT_PROVIDERS")
OPENAI_API_KEY = env_str("OPENAI_API_KEY")
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL")
LLM_PROVIDER = env_str("LLM_PROVIDER", "openai" if OPENAI_API_KEY else "offline")
if LLM_PROVIDER not in {"openai", "offline"}:
    raise ImproperlyConfigured(f"LLM_PROVIDER={LLM_PROVIDER!r}: use 'openai' or 'offline'.")
# A model is `<provider>/<model>`; with one provider its name may be left out. With
# TOOLCHAT_PROVIDERS and no LLM_MODEL, the first model of the first provider.
LLM_MODEL = env_str(
    "LLM_MODEL",
    "" if TOOLCHAT_PROVIDERS else "gpt-4o-mini" if LLM_PROVIDER == "openai" else "offline",
)
LLM_COMPOSE_MODEL = env_str("LLM_COMPOSE_MODEL")
# Without TOOLCHAT_PROVIDERS: the models a conversation may choose (each costs
# money), the configured ones unless the operator lists more. With the file, each
# provider's `models` say it.
LLM_ALLOWED_MODELS = env_list(
    "LLM_ALLOWED_MODELS", [name for name in (LLM_MODEL, LLM_COMPOSE_MODEL) if name]
)
# The composing call (the answer after the tools) is a short, natural reply:
# it is capped and a little warmer than the tool-choosing call. 0 tokens or a
# temperature of "none" sends none (for models that reject `temperature`).
LLM_COMPOSE_MAX_TOKENS = env_int("LLM_COMPOSE_MAX_TOKENS", 600) or None
# Every other call (choosing tools, deciding, a direct answer) is capped only when
# this is set: a reasoning model's thinking counts against it. Set it for small
# local models, which may otherwise write until their context is full.
LLM_MAX_TOKENS = env_int("LLM_MAX_TOKENS", 0) or None
# The limit of a call that sets none, to a server on this machine or its network
# (chat/llm/limits.py, `local_server`): llama.cpp, llama-cpp-python, Ollama and
# vLLM let a model write until its context is full, or without end. 0 sends none.
LLM_LOCAL_MAX_TOKENS = env_int("LLM_LOCAL_MAX_TOKENS", 4096) or None
LLM_COMPOSE_TEMPERATURE = (
    None
    if env_str("LLM_COMPOSE_TEMPERATURE").lower() == "none"
    else env_float("LLM_COMPOSE_TEMPERATURE", 0.7)
)
# The system prompt every model call begins with, unless the conversation sets its
# own (chat/prompts.py). Small local models may answer nothing at all without
# one. "none" sends none (an unset or empty variable takes the default, as every
# other setting does: docker-compose passes unset variables as empty).
TOOLCHAT_SYSTEM_PROMPT = env_str(
    "TOOLCHAT_SYSTEM_PROMPT",
    "You are a helpful assistant. Use the tools offered when they help, "
    "and answer the user in plain words.",
)
if TOOLCHAT_SYSTEM_PROMPT.lower() == "none":
    TOOLCHAT_SYSTEM_PROMPT = ""
# Follow-up suggestions written by the model, one small call after each answer:
# "auto" asks the offline model only (free), "on" any model, "off" none. Tools'
# own suggestions are offered whatever this says.
LLM_SUGGESTIONS = env_str("LLM_SUGGESTIONS", "auto").lower()
if LLM_SUGGESTIONS not in {"auto", "on", "off"}:
    raise ImproperlyConfigured(f"LLM_SUGGESTIONS={LLM_SUGGESTIONS!r}: use auto, on or off.")
LLM_TIMEOUT_S = env_float("LLM_TIMEOUT_S", 60.0)
# Retries of a failed request: a call makes at most LLM_MAX_RETRIES + 1 attempts.
LLM_MAX_RETRIES = env_int("LLM_MAX_RETRIES", 3)
# The read timeout starts again at every byte: these bound a call however its
# server trickles. One request and its stream (a late one is asked again), and
# the whole call with its retries.
LLM_ATTEMPT_DEADLINE_S = env_float("LLM_ATTEMPT_DEADLINE_S", 300.0)
LLM_CALL_DEADLINE_S = env_float("LLM_CALL_DEADLINE_S", 600.0)
# The offline model streams its answers a word at a time, this far apart, so that
# the app shows what streaming looks like; 0 sends each answer at once.
TOOLCHAT_OFFLINE_WORD_DELAY_MS = env_int("TOOLCHAT_OFFLINE_WORD_DELAY_MS", 20)
if TOOLCHAT_OFFLINE_WORD_DELAY_MS < 0:
    raise ImproperlyConfigured(
        f"TOOLCHAT_OFFLINE_WORD_DELAY_MS={env_str('TOOLCHAT_OFFLINE_WORD_DELAY_MS')!r}: "
        "use 0 or more milliseconds."
    )

# --- Tools and limits ---------------------------------------------------------------

TOOLCHAT_TOOL_MODULES = env_list(
    "TOOLCHAT_TOOL_MODULES",
    [
        "tools.builtin.calculator",
        "tools.builtin.current_time",
        "tools.builtin.notes",
        "tools.builtin.dataset",
    ],
)
TOOL_RESULT_MAX_CHARS = env_int("TOOL_RESULT_MAX_CHARS", 10_000)
# MCP servers whose tools are offered beside the Python ones: an `mcpServers`
# JSON file (docs/tools.md). Each process connects when their tools are first
# wanted, waiting at most CONNECT_TIMEOUT for a server; lists them again every
# REFRESH seconds, and tries a server that did not answer again after RETRY.
TOOLCHAT_MCP_CONFIG = env_str("TOOLCHAT_MCP_CONFIG", "")
TOOLCHAT_MCP_CONNECT_TIMEOUT_S = env_float("TOOLCHAT_MCP_CONNECT_TIMEOUT_S", 10.0)
TOOLCHAT_MCP_REFRESH_S = env_float("TOOLCHAT_MCP_REFRESH_S", 300.0)
TOOLCHAT_MCP_RETRY_S = env_float("TOOLCHAT_MCP_RETRY_S", 30.0)
MAX_MESSAGE_CHARS = env_int("MAX_MESSAGE_CHARS", 32_000)
# Images a user message may carry (chat/images.py): each at most this many bytes, at
# most this many a message. A request's body must hold them, base64 (4 characters for
# 3 bytes): Django's limit on a body, 2.5 MB by default, is raised to fit a few.
TOOLCHAT_IMAGE_MAX_BYTES = env_int("TOOLCHAT_IMAGE_MAX_BYTES", 5 * 1024 * 1024)
TOOLCHAT_IMAGE_MAX_COUNT = env_int("TOOLCHAT_IMAGE_MAX_COUNT", 8)
# A model call carries the newest this many images of its history (the older ones said
# in words): a worker reads, and a provider is sent, a bounded number of bytes however
# many images a conversation gathers. At least a message's worth.
TOOLCHAT_HISTORY_MAX_IMAGES = max(
    env_int("TOOLCHAT_HISTORY_MAX_IMAGES", 16), TOOLCHAT_IMAGE_MAX_COUNT
)
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 24 * 1024 * 1024)
# A conversation's system prompt is sent on every model call, outside the
# history budget: bounded like a message.
MAX_SYSTEM_PROMPT_CHARS = env_int("MAX_SYSTEM_PROMPT_CHARS", 8_000)
# The history sent to a model is trimmed to these budgets (oldest turns first,
# never splitting a tool call from its results, always keeping the system prompt).
TOOLCHAT_HISTORY_MAX_MESSAGES = env_int("TOOLCHAT_HISTORY_MAX_MESSAGES", 400)
TOOLCHAT_HISTORY_MAX_CHARS = env_int("TOOLCHAT_HISTORY_MAX_CHARS", 400_000)
