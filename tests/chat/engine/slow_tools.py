"""Tools for the worker tests: they take their time and keep a ledger of every run.

The ledger (a file named by TOOLCHAT_TEST_LEDGER) gets one line when a call
starts and one when it ends, so a test can tell how often a tool really ran,
across worker processes and crashes.
"""

from __future__ import annotations

import os
import time
from typing import Any

from tools.context import ToolContext
from tools.registry import tool


def _ledger(line: str) -> None:
    path = os.environ.get("TOOLCHAT_TEST_LEDGER")
    if path:
        with open(path, "a", encoding="utf-8") as ledger:
            ledger.write(line + "\n")


@tool(timeout=20, idempotent=True)
def slow_step(ctx: ToolContext, label: str, seconds: float = 1.0) -> dict[str, Any]:
    """Wait a while, then report (an idempotent test tool).

    Args:
        label: A name for this call, written to the ledger.
        seconds: How long to take.
    """
    _ledger(f"start {label}")
    time.sleep(seconds)
    _ledger(f"end {label}")
    return {"success": True, "label": label, "message": f"{label} done"}


@tool(timeout=20, idempotent=False)
def slow_side_effect(ctx: ToolContext, label: str, seconds: float = 1.0) -> dict[str, Any]:
    """Wait a while, then report (a non-idempotent test tool: it must never run twice).

    Args:
        label: A name for this call, written to the ledger.
        seconds: How long to take.
    """
    _ledger(f"start {label}")
    time.sleep(seconds)
    _ledger(f"end {label}")
    return {"success": True, "label": label, "message": f"{label} done"}


@tool(timeout=5)
def explode(ctx: ToolContext, reason: str = "boom") -> dict[str, Any]:
    """Raise an exception (a test tool for tools that crash).

    Args:
        reason: The exception's message.
    """
    raise RuntimeError(reason)


@tool(timeout=5, return_direct=True)
def final_word(ctx: ToolContext, text: str) -> dict[str, Any]:
    """Say something that ends the turn as it is (a return_direct test tool).

    Args:
        text: What to say.
    """
    return {"success": True, "message": text}


@tool(timeout=5)
def echo(ctx: ToolContext, text: str) -> dict[str, Any]:
    """Say the text back, whatever it holds (NUL bytes, lone surrogates)."""
    return {"echo": text, "message": f"You said: {text}"}


@tool(timeout=5, requires_approval=True)
def launch_rocket(ctx: ToolContext, target: str) -> dict[str, Any]:
    """Launch a rocket at a target (a test tool that must not run without approval).

    Args:
        target: Where to.
    """
    _ledger(f"launched {target}")
    return {"success": True, "message": f"Launched at {target}."}


@tool(timeout=5, requires_approval=True, idempotent=False)
def pay_invoice(ctx: ToolContext, invoice: str, seconds: float = 0.0) -> dict[str, Any]:
    """Pay an invoice (a non-idempotent test tool that needs approval; the ledger is the payment).

    Args:
        invoice: Which invoice, written to the ledger once it is paid.
        seconds: How long the payment takes after it is made.
    """
    _ledger(f"paid {invoice}")
    time.sleep(seconds)
    return {"success": True, "message": f"Paid invoice {invoice}."}
