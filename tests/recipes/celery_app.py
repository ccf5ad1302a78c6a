"""The Celery app of the Celery + Flower recipe (docs/http-backend.md, "Recipes").

Broker and result backend on Redis (``NIGHTSHIFT_TEST_CELERY_URL``, default database 5). Start
Flower and a worker (``-E``: the task events Flower knows tasks by) on it::

    celery -A tests.recipes.celery_app flower --port=5555 --basic-auth=night:s3cret
    celery -A tests.recipes.celery_app worker -E -Q nightly -c 2
"""

from __future__ import annotations

import os
import time

from celery import Celery

REDIS_URL = os.environ.get("NIGHTSHIFT_TEST_CELERY_URL", "redis://127.0.0.1:6379/5")

app = Celery("nightly", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(
    task_track_started=True,  # STARTED in the result backend too, not only in Flower's events
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="nightly.work")
def work(seconds: float = 1.0, fail: str | None = None) -> dict[str, float]:
    """A night's job: works ``seconds``, then raises ``fail`` as its error when one is given."""
    time.sleep(seconds)
    if fail:
        raise RuntimeError(fail)
    return {"slept": seconds}
