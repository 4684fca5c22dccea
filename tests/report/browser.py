"""Headless Chromium driven over the DevTools protocol on a pipe (no extra Python package).

``--remote-debugging-pipe`` makes Chromium read commands on fd 3 and write replies on fd 4, each
message JSON followed by a NUL byte. The page is opened from file:// with the network off: a
fresh network namespace when we may make one (only loopback, down), and in any case every host
name resolving to nothing. Every request the page makes, every console message and exception
and every CSP or log error is recorded, so a test can prove that nothing left the page.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--no-proxy-server",
    "--window-size=1200,900",
    "--remote-debugging-pipe",
)


def chromium_executable() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _network_off_prefix() -> list[str]:
    """``unshare -n`` when it works here (root on Linux): the browser gets no network at all."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0:
        return [unshare, "-n"]
    return []


@dataclass
class PageRun:
    """What happened while one page was open."""

    requests: list[str] = field(default_factory=list)
    console: list[tuple[str, str]] = field(default_factory=list)  # (level, text)
    errors: list[str] = field(default_factory=list)  # exceptions, error log entries (CSP ...)

    @property
    def console_errors(self) -> list[str]:
        return [text for level, text in self.console if level in ("error", "assert")] + self.errors


class Chromium:
    """One headless Chromium with a fresh profile; use as a context manager."""

    def __init__(self, executable: str, deadline_s: float = 60.0) -> None:
        self._profile = tempfile.mkdtemp(prefix="nccldoctor-chromium-")
        self._deadline_s = deadline_s
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # Move the child's ends to 10 and above so that placing them on 3 and 4 clobbers nothing.
        child_r = fcntl.fcntl(to_child_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_w = fcntl.fcntl(from_child_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_child_r)
        os.close(from_child_w)
        command = [
            *_network_off_prefix(),
            sys.executable,
            "-c",
            "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); "
            "os.execv(sys.argv[3], sys.argv[3:])",
            str(child_r),
            str(child_w),
            executable,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={self._profile}",
            "about:blank",
        ]
        self._log = open(Path(self._profile) / "chromium.log", "wb")  # noqa: SIM115
        self._proc = subprocess.Popen(
            command, pass_fds=(child_r, child_w), stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        os.close(child_r)
        os.close(child_w)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError, TimeoutError, RuntimeError):
            self._send("Browser.close")
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=10)
        for fd in (self._to_child, self._from_child):
            os.close(fd)
        self._log.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def _send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        return self._wait(lambda m: m.get("id") == message["id"], method)

    def _wait(self, match: Any, what: str) -> dict:
        deadline = time.monotonic() + self._deadline_s
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message = json.loads(raw)
                if match(message):
                    if "error" in message:
                        raise RuntimeError(f"{what}: {message['error']}")
                    return message
                self._events.append(message)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"Chromium did not answer {what} within {self._deadline_s} s")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if ready:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"Chromium exited while waiting for {what}")
                self._buffer += chunk

    def open(
        self, path: Path, screenshot: Path | None = None, checks: str = "null"
    ) -> tuple[PageRun, Any]:
        """Load ``path`` from file://, evaluate ``checks`` (a JS expression) and screenshot it."""
        target = self._send("Target.createTarget", {"url": "about:blank"})["result"]["targetId"]
        session = self._send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "result"
        ]["sessionId"]
        for domain in ("Network", "Runtime", "Log", "Page"):
            self._send(f"{domain}.enable", session=session)
        self._events.clear()
        self._send("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
        self._wait(lambda m: m.get("method") == "Page.loadEventFired", "the page load")
        value = self._send(
            "Runtime.evaluate", {"expression": checks, "returnByValue": True}, session=session
        )["result"]["result"].get("value")
        if screenshot:
            shot = self._send(
                "Page.captureScreenshot",
                {"format": "png", "captureBeyondViewport": True},
                session=session,
            )
            screenshot.write_bytes(base64.b64decode(shot["result"]["data"]))
        run = PageRun()
        for event in self._events:
            params = event.get("params", {})
            method = event.get("method")
            if method == "Network.requestWillBeSent":
                run.requests.append(params["request"]["url"])
            elif method == "Runtime.consoleAPICalled":
                text = " ".join(
                    str(a.get("value", a.get("description", ""))) for a in params.get("args", [])
                )
                run.console.append((params.get("type", ""), text))
            elif method == "Runtime.exceptionThrown":
                run.errors.append(json.dumps(params.get("exceptionDetails", {}))[:500])
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                run.errors.append(params["entry"].get("text", ""))
        self._send("Target.closeTarget", {"targetId": target})
        return run, value
