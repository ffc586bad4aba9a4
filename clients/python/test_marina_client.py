"""Tests of marina_client.py against a real Marina server.

Run by packages/client/test/python-client.test.ts, which starts `serve` (token authorization on,
models `sleepy` with a job queue of MARINA_TEST_QUEUE_SIZE and `tiny`, an image classifier) and
passes its address in the environment:
MARINA_TEST_URL, MARINA_TEST_MANAGEMENT_URL, MARINA_TEST_KEY_FILE, MARINA_TEST_IMAGE.
"""

import json
import os
import threading
import time
import unittest
import urllib.request

from marina_client import MarinaClient, MarinaError

URL = os.environ["MARINA_TEST_URL"]
MANAGEMENT_URL = os.environ["MARINA_TEST_MANAGEMENT_URL"]
KEY_FILE = os.environ["MARINA_TEST_KEY_FILE"]
IMAGE = os.environ["MARINA_TEST_IMAGE"]
QUEUE_SIZE = int(os.environ["MARINA_TEST_QUEUE_SIZE"])


def wait_until_busy(model):
    """Polls describe until a worker of `model` is BUSY (a state, not a duration)."""
    with open(KEY_FILE, encoding="utf-8") as f:
        key = json.load(f)["management"]["key"]
    while True:
        request = urllib.request.Request(f"{MANAGEMENT_URL}/models/{model}", headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(request) as response:
            description = json.load(response)[0]
        if any(w["status"] == "BUSY" for w in description["workers"]):
            return
        time.sleep(0.02)


def block_worker(sleep_ms):
    """Holds sleepy's only worker for sleep_ms; returns the thread once the worker is busy with it."""
    client = MarinaClient(URL, key_file=KEY_FILE)
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("value", client.predict("sleepy", {"sleepMs": sleep_ms, "value": "blocker"})))
    thread.start()
    wait_until_busy("sleepy")
    return thread, outcome


class MarinaClientTest(unittest.TestCase):
    def test_key_file_ping_and_predict(self):
        client = MarinaClient(URL, key_file=KEY_FILE)
        self.assertTrue(client.ping())
        self.assertEqual(client.predict("sleepy", {"value": 42}), {"echo": 42})
        with open(IMAGE, "rb") as f:
            top = client.predict("tiny", f.read())
        self.assertIsInstance(top, dict)
        self.assertEqual(len(top), 5)

    def test_token_from_environment_and_401_not_retried(self):
        with open(KEY_FILE, encoding="utf-8") as f:
            key = json.load(f)["inference"]["key"]
        previous = os.environ.get("MARINA_TOKEN")
        try:
            os.environ["MARINA_TOKEN"] = key
            self.assertEqual(MarinaClient(URL).predict("sleepy", {"value": 1}), {"echo": 1})
            os.environ["MARINA_TOKEN"] = "not-the-key"
            with self.assertRaises(MarinaError) as caught:
                MarinaClient(URL).predict("sleepy", {"value": 1})
            self.assertEqual(caught.exception.status_code, 401)
            self.assertEqual(caught.exception.code, "MARINA_ERR_TOKEN_INVALID")
            self.assertEqual(caught.exception.attempts, 1)
        finally:
            if previous is None:
                os.environ.pop("MARINA_TOKEN", None)
            else:
                os.environ["MARINA_TOKEN"] = previous

    def test_unknown_model_has_the_servers_code(self):
        retries = []
        client = MarinaClient(URL, key_file=KEY_FILE, on_retry=retries.append)
        with self.assertRaises(MarinaError) as caught:
            client.predict("no-such-model", {"value": 1})
        self.assertEqual((caught.exception.status_code, caught.exception.code), (404, "MARINA_ERR_MODEL_NOT_FOUND"))
        self.assertEqual(retries, [])

    def test_full_queue_without_retries_is_queue_full(self):
        thread, outcome = block_worker(3000)
        client = MarinaClient(URL, key_file=KEY_FILE, max_retries=0)
        results = client.predict_many("sleepy", [{"value": i} for i in range(12)], concurrency=12, settle=True)
        rejected = [r for r in results if not r["ok"]]
        served = [(i, r) for i, r in enumerate(results) if r["ok"]]
        self.assertGreater(len(rejected), 0)
        self.assertGreaterEqual(len(served), QUEUE_SIZE)
        for r in rejected:
            e = r["error"]
            self.assertEqual((e.status_code, e.code, e.type, e.retry_after_s, e.attempts), (503, "MARINA_ERR_QUEUE_FULL", "ServiceUnavailableException", 1.0, 1))
        for i, r in served:
            self.assertEqual(r["value"], {"echo": i})
        thread.join()
        self.assertEqual(outcome["value"], {"echo": "blocker"})

    def test_predict_many_retries_a_full_queue_and_keeps_order(self):
        thread, _ = block_worker(2000)
        retries = []
        client = MarinaClient(URL, key_file=KEY_FILE, max_retries=20, on_retry=retries.append)
        results = client.predict_many("sleepy", ({"value": i} for i in range(12)), concurrency=12)
        self.assertEqual(results, [{"echo": i} for i in range(12)])
        self.assertGreater(len(retries), 0)
        for event in retries:
            self.assertEqual(event["error"].code, "MARINA_ERR_QUEUE_FULL")
            self.assertGreaterEqual(event["attempt"], 2)
        thread.join()

    def test_concurrency_bound(self):
        client = MarinaClient(URL, key_file=KEY_FILE)
        lock = threading.Lock()
        state = {"in_flight": 0, "most": 0}

        def inputs():
            for i in range(10):
                with lock:
                    state["in_flight"] += 1
                    state["most"] = max(state["most"], state["in_flight"])
                yield {"value": i}

        def done(_index, _outcome):
            with lock:
                state["in_flight"] -= 1

        results = client.predict_many("sleepy", inputs(), concurrency=3, on_result=done)
        self.assertEqual(results, [{"echo": i} for i in range(10)])
        self.assertLessEqual(state["most"], 3)

    def test_first_failure_stops_new_requests(self):
        client = MarinaClient(URL, key_file=KEY_FILE)
        started = []

        def inputs():
            for i in range(20):
                started.append(i)
                yield b"not an image"

        with self.assertRaises(MarinaError) as caught:
            client.predict_many("tiny", inputs(), concurrency=1)
        self.assertEqual((caught.exception.status_code, caught.exception.code), (400, "MARINA_ERR_IMAGE_DECODE_FAILED"))
        self.assertEqual(started, [0])

    def test_errors_without_an_answer(self):
        with self.assertRaises(MarinaError) as caught:
            MarinaClient("http://127.0.0.1:9").predict("sleepy", {"value": 1})
        self.assertEqual(caught.exception.code, "MARINA_ERR_CLIENT_CONNECTION_FAILED")
        with self.assertRaises(MarinaError) as caught:
            MarinaClient("ftp://x")
        self.assertEqual(caught.exception.code, "MARINA_ERR_CLIENT_OPTION_INVALID")
        with self.assertRaises(MarinaError) as caught:
            MarinaClient(URL, key_file="/nonexistent/key_file.json")
        self.assertEqual(caught.exception.code, "MARINA_ERR_CLIENT_KEY_FILE_INVALID")

    def test_zz_timeout(self):
        # Runs last (unittest sorts by name): it leaves the worker busy for 5 s.
        client = MarinaClient(URL, key_file=KEY_FILE, timeout_s=0.2)
        with self.assertRaises(MarinaError) as caught:
            client.predict("sleepy", {"sleepMs": 5000, "value": "slow"})
        self.assertEqual((caught.exception.code, caught.exception.status_code), ("MARINA_ERR_CLIENT_RESPONSE_TIMEOUT", 0))


if __name__ == "__main__":
    unittest.main()
