"""Demo job: do `seconds` of pretend work named `what`, printing a line per step."""

import sys
import time

what, seconds = sys.argv[1], float(sys.argv[2])
steps = max(1, int(seconds * 4))
for i in range(1, steps + 1):
    print(f"{what}: step {i}/{steps}", flush=True)
    time.sleep(seconds / steps)
print(f"{what}: done")
