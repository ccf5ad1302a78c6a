"""The night's first Prefect slot lease against the later ones, with and without opening first.

On a temporary Prefect server: a limit of one slot; ``ROUNDS`` times, a fresh lease API (as a
night makes one) takes a slot and gives it back five times. ``cold``: the first acquire opens
the client itself (as before); ``opened``: ``open()`` ran first, as ``prefect_slots`` now does
before the night's first submit. Prints the median time of the first acquire and of the later
ones.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

ROUNDS = 5
LATER = 4


def main() -> int:
    tmp = tempfile.mkdtemp(prefix="nightshift-lease-")
    os.environ["PREFECT_HOME"] = tmp
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    from prefect.client.orchestration import get_client
    from prefect.testing.utilities import prefect_test_harness

    from nightshift.orchestration.leases import PrefectLeaseApi

    with prefect_test_harness(server_startup_timeout=180):
        with get_client(sync_client=True) as client:
            client.upsert_global_concurrency_limit_by_name("nightshift-bench-lease", 1)
        figures: dict[str, tuple[list[float], list[float]]] = {}
        for kind in ("cold", "opened", "cold", "opened") * ROUNDS:
            api = PrefectLeaseApi(60.0)
            if kind == "opened":
                api.open()
            times = []
            for _ in range(1 + LATER):
                t0 = time.perf_counter()
                lease = api.acquire("nightshift-bench-lease")
                times.append(time.perf_counter() - t0)
                assert lease is not None
                api.release(lease)
            api.close()
            first, later = figures.setdefault(kind, ([], []))
            first.append(times[0])
            later.extend(times[1:])
    load = os.getloadavg()
    print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("| lease API | first acquire (median) | later acquires (median) |")
    print("|---|---|---|")
    for kind, (first, later) in figures.items():
        print(
            f"| {kind} | {statistics.median(first) * 1000:.0f} ms "
            f"| {statistics.median(later) * 1000:.0f} ms |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
