"""Demo job: pretend to audit internal links; `--broken` fails like a real one."""

import sys
import time

pages = 8
for i in range(1, pages + 1):
    print(f"checked page {i}/{pages}: 0 broken links", flush=True)
    time.sleep(0.1)
if "--broken" in sys.argv:
    print("ERROR: /guides/antigravity-cli -> 404 (linked from 3 pages)", flush=True)
    sys.exit(1)
print("all internal links ok")
