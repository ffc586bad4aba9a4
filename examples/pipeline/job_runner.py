"""A pipeline job: classify every JPEG in a folder through one Marina server, at most N requests in flight.

Usage: python3 job_runner.py <image-folder> [model=resnet-18] [concurrency=4]
The server's address and key come from MARINA_URL and MARINA_KEY_FILE (or MARINA_TOKEN).
marina_client.py is one file with no dependencies: copy it next to your job (here it is imported from clients/python).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
from marina_client import MarinaClient  # noqa: E402

folder = sys.argv[1]
model = sys.argv[2] if len(sys.argv) > 2 else "resnet-18"
concurrency = int(sys.argv[3]) if len(sys.argv) > 3 else 4
files = sorted(f for f in os.listdir(folder) if f.lower().endswith((".jpg", ".jpeg")))
retries = []
client = MarinaClient(on_retry=retries.append)


def images():
    # A generator: each image is read only when a slot is free.
    for name in files:
        with open(os.path.join(folder, name), "rb") as f:
            yield f.read()


started = time.perf_counter()
outcomes = client.predict_many(model, images(), concurrency=concurrency, settle=True)
seconds = time.perf_counter() - started
failed = [f"{files[i]}: {o['error']}" for i, o in enumerate(outcomes) if not o["ok"]]
print(f"{len(files)} images, {len(files) - len(failed)} classified, {len(failed)} failed, {len(retries)} retries, "
      f"in {seconds:.1f} s ({len(files) / seconds:.1f} images/s)")
first = next((i for i, o in enumerate(outcomes) if o["ok"]), None)
if first is not None:
    print(f"{files[first]}: {json.dumps(outcomes[first]['value'])}")
for line in failed[:5]:
    print(line)
sys.exit(1 if failed else 0)
