"""The fake job CLI (sandbox/agy.py), each call logged with its time and what it answered.

``FANOUT_CALLS`` names a JSON-lines file, one ``{"t", "argv", "final"}`` per call: ``t`` when
the answer was ready (epoch seconds), ``final`` the ids of the jobs it showed in a final state,
so a job's end was seen by the first call that showed it final.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time

from nightshift.sandbox.agy import main

FINAL = ("succeeded", "failed", "cancelled")


def final_ids(out: str) -> list[str]:
    """The job ids a ``--json`` answer shows in a final state."""
    try:
        answer = json.loads(out)
    except ValueError:
        return []
    views = answer if isinstance(answer, list) else [answer]
    return [v["job_id"] for v in views if isinstance(v, dict) and v.get("state") in FINAL]


if __name__ == "__main__":
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(sys.argv[1:])
    t = time.time()
    sys.stdout.write(buffer.getvalue())
    sys.stdout.flush()
    line = {"t": t, "argv": sys.argv[1:], "final": final_ids(buffer.getvalue())}
    with open(os.environ["FANOUT_CALLS"], "a", encoding="utf-8") as log:
        log.write(json.dumps(line) + "\n")
    raise SystemExit(code)
