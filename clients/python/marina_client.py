"""A client for a Marina (TorchServe-compatible) inference server.

Python >= 3.9, standard library only. Install it as a package,
``pip install --no-build-isolation --no-index ./clients/python`` (no index needed), or copy this one
file next to your job.

    from marina_client import MarinaClient, MarinaError

    client = MarinaClient("http://127.0.0.1:8080", key_file="key_file.json")
    client.ping()                                   # True when the server is healthy
    top5 = client.predict("resnet-18", open("kitten.jpg", "rb").read())
    results = client.predict_many("resnet-18", (open(p, "rb").read() for p in paths), concurrency=4)

The same three calls as the Node package ``@marina/client``:

- ``predict(model, data)``: bytes go as application/octet-stream, ``str`` as text/plain, anything
  else as JSON. Returns parsed JSON, ``str`` for text answers, ``bytes`` otherwise.
- ``predict_many(model, inputs, concurrency=4, settle=False)``: at most ``concurrency`` requests
  in flight; results in the order of ``inputs``. ``inputs`` is read lazily.
- ``ping()``.

Retries happen only where the server says a retry can succeed: a 503 with ``Retry-After``
(a full queue, for example). Every failure is a ``MarinaError`` whose ``code`` is the server's
``marinaCode`` (``MARINA_ERR_QUEUE_FULL``, ``MARINA_ERR_MODEL_NOT_FOUND``...) or one of the
client's own (``MARINA_ERR_CLIENT_RESPONSE_TIMEOUT``, ``MARINA_ERR_CLIENT_CONNECTION_FAILED``,
``MARINA_ERR_CLIENT_HTTP_ERROR``, ``MARINA_ERR_CLIENT_KEY_FILE_INVALID``,
``MARINA_ERR_CLIENT_OPTION_INVALID``).

The token comes from ``token=``, else ``$MARINA_TOKEN``, else the ``inference.key`` of
``key_file=`` or ``$MARINA_KEY_FILE``; without any, no Authorization header is sent.
"""

__version__ = "0.1.0"  # keep equal to pyproject.toml's version (the Python client test checks)

import email.utils
import json
import os
import random
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterable, List, Optional, Union

__all__ = ["MarinaClient", "MarinaError"]

TORCHSERVE_DEFAULT_RESPONSE_TIMEOUT_S = 120.0


class MarinaError(Exception):
    """A failed call. ``code`` is stable (Marina's error codes); ``status_code`` is the HTTP status (0: no answer)."""

    def __init__(self, code: str, message: str, status_code: int = 0, type_: Optional[str] = None,
                 retry_after_s: Optional[float] = None, attempts: int = 1, request_id: Optional[str] = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status_code = status_code
        self.type = type_
        self.retry_after_s = retry_after_s
        self.attempts = attempts
        self.request_id = request_id

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def _option_error(message: str) -> MarinaError:
    return MarinaError("MARINA_ERR_CLIENT_OPTION_INVALID", message)


def _read_inference_key(path: str) -> str:
    try:
        with open(path, "r", encoding="utf-8") as f:
            parsed = json.load(f)
    except (OSError, ValueError) as error:
        raise MarinaError("MARINA_ERR_CLIENT_KEY_FILE_INVALID",
                          f"cannot read the key file {path}: {error}; pass the server's key_file.json "
                          "(it is written in the directory serve was started from)") from error
    key = parsed.get("inference", {}).get("key") if isinstance(parsed, dict) and isinstance(parsed.get("inference"), dict) else None
    if not isinstance(key, str) or not key:
        raise MarinaError("MARINA_ERR_CLIENT_KEY_FILE_INVALID", f"the key file {path} has no inference.key; pass the server's key_file.json")
    return key


def _parse_retry_after(value: Optional[str]) -> Optional[float]:
    if value is None or not value.strip():
        return None
    try:
        seconds = float(value)
        return seconds if seconds >= 0 else None
    except ValueError:
        pass
    try:
        date = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, date.timestamp() - time.time())


def _encode(data: Any, content_type: Optional[str]):
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data), content_type or "application/octet-stream"
    if isinstance(data, str):
        return data.encode("utf-8"), content_type or "text/plain; charset=utf-8"
    return json.dumps(data).encode("utf-8"), content_type or "application/json"


class MarinaClient:
    """A client for one server's inference API. Thread-safe: ``predict_many`` calls ``predict`` from a thread pool."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, key_file: Optional[str] = None,
                 timeout_s: float = TORCHSERVE_DEFAULT_RESPONSE_TIMEOUT_S, max_retries: int = 10,
                 max_retry_delay_s: float = 30.0,
                 on_retry: Optional[Callable[[Dict[str, Any]], None]] = None):
        url = (url or os.environ.get("MARINA_URL") or "http://127.0.0.1:8080").rstrip("/")
        if not re.match(r"^https?://[^/]+$", url):
            raise _option_error(f"url must be an http(s) origin such as http://127.0.0.1:8080, got '{url}'")
        if not timeout_s > 0:
            raise _option_error(f"timeout_s must be more than 0, got {timeout_s}")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise _option_error(f"max_retries must be a whole number of 0 or more, got {max_retries}")
        self.url = url
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.max_retry_delay_s = max_retry_delay_s
        self.on_retry = on_retry
        key_file = key_file or os.environ.get("MARINA_KEY_FILE")
        token = token or os.environ.get("MARINA_TOKEN") or (_read_inference_key(key_file) if key_file else None)
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}

    def _open(self, method: str, path: str, body: Optional[bytes], headers: Dict[str, str], attempts: int):
        """One HTTP attempt: returns (status, headers, body bytes) for any status; raises MarinaError when there is no answer."""
        request = urllib.request.Request(self.url + path, data=body, method=method, headers={**headers, **self._auth})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, error.headers, error.read()
        except (socket.timeout, TimeoutError) as error:
            raise MarinaError("MARINA_ERR_CLIENT_RESPONSE_TIMEOUT",
                              f"{method} {path}: no answer from {self.url} within {self.timeout_s} s (attempt {attempts}); "
                              "the server may still be running it", attempts=attempts) from error
        except urllib.error.URLError as error:
            if isinstance(error.reason, (socket.timeout, TimeoutError)):
                raise MarinaError("MARINA_ERR_CLIENT_RESPONSE_TIMEOUT",
                                  f"{method} {path}: no answer from {self.url} within {self.timeout_s} s (attempt {attempts})",
                                  attempts=attempts) from error
            raise MarinaError("MARINA_ERR_CLIENT_CONNECTION_FAILED",
                              f"{method} {path}: cannot reach {self.url} ({error.reason}); is serve running there?",
                              attempts=attempts) from error
        except (ConnectionError, OSError) as error:
            raise MarinaError("MARINA_ERR_CLIENT_CONNECTION_FAILED",
                              f"{method} {path}: cannot reach {self.url} ({error}); is serve running there?",
                              attempts=attempts) from error

    def predict(self, model: str, data: Any, version: Optional[str] = None, content_type: Optional[str] = None) -> Any:
        """One prediction (POST /predictions/{model}[/{version}]); retries only a 503 with Retry-After."""
        if not isinstance(model, str) or not model:
            raise _option_error("model must be a model name")
        path = "/predictions/" + urllib.parse.quote(model, safe="") + ("/" + urllib.parse.quote(version, safe="") if version else "")
        body, ctype = _encode(data, content_type)
        attempts = 1
        while True:
            status, headers, payload = self._open("POST", path, body, {"Content-Type": ctype}, attempts)
            if 200 <= status < 300:
                answer_type = headers.get("Content-Type", "") or ""
                if answer_type.lower().startswith("application/json"):
                    return json.loads(payload.decode("utf-8"))
                if answer_type.lower().startswith("text/"):
                    return payload.decode("utf-8")
                return payload
            error = self._error(status, headers, payload, model, attempts)
            if status != 503 or error.retry_after_s is None or attempts > self.max_retries:
                raise error
            delay_s = min(self.max_retry_delay_s, error.retry_after_s * (1 + random.random() * 0.2))
            if self.on_retry:
                self.on_retry({"model": model, "attempt": attempts + 1, "delay_s": delay_s, "error": error})
            time.sleep(delay_s)
            attempts += 1

    @staticmethod
    def _error(status: int, headers, payload: bytes, model: str, attempts: int) -> MarinaError:
        text = payload.decode("utf-8", errors="replace")
        try:
            body = json.loads(text)
        except ValueError:
            body = None
        body = body if isinstance(body, dict) else {}
        message = body.get("message") if isinstance(body.get("message"), str) else (text[:300] or str(status))
        if isinstance(body.get("hint"), str):
            # TorchServe's exact sentence, then Marina's guidance.
            message = f"{message} ({body['hint']})"
        code = body.get("marinaCode") if isinstance(body.get("marinaCode"), str) else "MARINA_ERR_CLIENT_HTTP_ERROR"
        return MarinaError(code, f"POST /predictions/{model}: {status} {message}", status_code=status,
                           type_=body.get("type") if isinstance(body.get("type"), str) else None,
                           retry_after_s=_parse_retry_after(headers.get("Retry-After")), attempts=attempts,
                           request_id=headers.get("x-request-id"))

    def predict_many(self, model: str, inputs: Iterable[Any], concurrency: int = 4, settle: bool = False,
                     version: Optional[str] = None, content_type: Optional[str] = None,
                     on_result: Optional[Callable[[int, Dict[str, Any]], None]] = None) -> List[Any]:
        """Predictions with at most ``concurrency`` in flight, results in input order.

        settle=False: the first failure is raised and no further requests start (those in flight finish).
        settle=True: never raises for a request's failure; each slot is {"ok": True, "value": ...}
        or {"ok": False, "error": MarinaError}.
        """
        if not isinstance(concurrency, int) or concurrency < 1:
            raise _option_error(f"concurrency must be a whole number of 1 or more, got {concurrency}")
        iterator = iter(inputs)
        lock = threading.Lock()
        results: Dict[int, Any] = {}
        state = {"next": 0, "error": None, "done": False}

        def take():
            with lock:
                if state["done"] or state["error"] is not None:
                    return None
                try:
                    item = next(iterator)
                except StopIteration:
                    state["done"] = True
                    return None
                index = state["next"]
                state["next"] += 1
                return index, item

        def slot():
            while True:
                taken = take()
                if taken is None:
                    return
                index, item = taken
                try:
                    value = self.predict(model, item, version=version, content_type=content_type)
                    outcome = {"ok": True, "value": value}
                except MarinaError as error:
                    outcome = {"ok": False, "error": error}
                    if not settle:
                        with lock:
                            if state["error"] is None:
                                state["error"] = error
                with lock:
                    results[index] = outcome if settle else outcome.get("value")
                if on_result:
                    on_result(index, outcome)

        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            for future in [pool.submit(slot) for _ in range(concurrency)]:
                future.result()
        if state["error"] is not None:
            raise state["error"]
        return [results[i] for i in range(state["next"])]

    def ping(self) -> bool:
        """GET /ping: True when the server answers {"status": "Healthy"}. Never retries."""
        status, _headers, payload = self._open("GET", "/ping", None, {}, 1)
        return 200 <= status < 300 and b'"Healthy"' in payload
