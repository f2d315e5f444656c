"""Telemetry in the ecosystem's formats: OpenTelemetry traces and Prometheus metrics.

Both are off and cost nothing unless configured (docs/observability.md). The
engine calls them at its single points: a run made (chat/services/runs.py),
a model call (chat/engine/model_calls.py), a tool execution
(chat/engine/tool_calls.py) and a run's end (chat/engine/finish.py).
"""
