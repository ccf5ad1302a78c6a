"""Demo job: pretend to audit internal links; `--broken` fails like a real one."""

import sys
import time

pages = 8
for i in range(1, pages + 1):
    print(f"checked page {i}/{pages}: 0 broken links", flush=True)
    time.sleep(0.1)
if "--broken" in sys.argv:
    # on stderr, as a real tool reports it: the digest's line for the job carries it
    print(
        "ERROR: /guides/antigravity-cli -> 404 (linked from 3 pages)", file=sys.stderr, flush=True
    )
    sys.exit(1)
print("all internal links ok")
