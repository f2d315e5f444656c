"""generate_dataset: a slow tool on purpose, to show progress events and self-truncation."""

from __future__ import annotations

import math
import random
import statistics
import time
from typing import Annotated, Any

from pydantic import Field

from tools.context import ToolContext
from tools.registry import tool

MAX_ROWS = 10_000
MAX_RETURNED = 100
SECONDS_PER_ROW = 0.001
# Twenty batches: a progress event every 5%, comfortably inside "every 10%".
BATCHES = 20
CATEGORIES = ("alpha", "beta", "gamma", "delta")


@tool(timeout=60)
def generate_dataset(
    ctx: ToolContext,
    rows: Annotated[int, Field(ge=1, le=MAX_ROWS)],
    limit: Annotated[int, Field(ge=0, le=MAX_RETURNED)] = MAX_RETURNED,
) -> dict[str, Any]:
    """Generate a synthetic dataset of sample rows (id, category, value), with a summary.

    It takes about a second per 1000 rows and reports progress while it works.

    Args:
        rows: How many rows to generate (1-10000).
        limit: How many rows to return at most (0-100); the summary covers all of them.
    """
    rng = random.Random(rows)  # the same request gives the same data
    batch_size = math.ceil(rows / min(rows, BATCHES))
    made: list[dict[str, Any]] = []
    ctx.emit_progress(0, f"Generating {rows} rows")
    while len(made) < rows:
        # The executor may have given up on us (timeout): stop instead of working on.
        if ctx.cancelled:
            break
        batch = min(batch_size, rows - len(made))
        start = len(made)
        made.extend(
            {
                "id": start + i + 1,
                "category": rng.choice(CATEGORIES),
                "value": round(rng.uniform(0, 1000), 2),
            }
            for i in range(batch)
        )
        time.sleep(batch * SECONDS_PER_ROW)
        ctx.emit_progress(len(made) * 100 // rows, f"Generated {len(made)} of {rows} rows")

    returned = made[:limit]
    values = [row["value"] for row in made]
    counts = dict.fromkeys(CATEGORIES, 0)
    for row in made:
        counts[row["category"]] += 1
    if len(returned) == len(made):
        message = f"Generated {len(made)} rows; all are returned."
    else:
        message = f"Generated {len(made)} rows; showing the first {len(returned)}."
    return {
        "success": True,
        "data": returned,
        "rows_generated": len(made),
        "returned": len(returned),
        "truncated": len(returned) < len(made),
        "summary": {
            "by_category": counts,
            "min_value": min(values, default=None),
            "max_value": max(values, default=None),
            "mean_value": round(statistics.fmean(values), 2) if values else None,
        },
        "message": message,
    }
