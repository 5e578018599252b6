#!/usr/bin/env python3
"""Drives Debian's chromium headless through the console, over the DevTools protocol on a pipe
(--remote-debugging-pipe: no port, no websocket library), and checks what an operator sees.

usage: console_browser.py CONSOLE_URL TOKEN KEY DEVICE OUT_DIR REDIS_CLI_ARGS...

Checks, each printed as `ok …` or `FAIL …` (exit 1 on any failure):
- an action without the token is refused;
- signing in with the token; the overview shows the streams with lag and pending, and its live
  part refreshes without a reload;
- the key's page lists its devices and its events; a team name with <script> shows as text and
  runs nothing;
- a dead letter is replayed from its page and reaches its stream (read back with redis-cli);
- no page is wider than a 1280-pixel screen; a screenshot of each is saved in OUT_DIR.
"""
import base64, json, os, shutil, subprocess, sys, tempfile, time

url, token, key, device, out = sys.argv[1:6]
redis_cli = sys.argv[6:]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


class Browser:
    def __init__(self):
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        if not exe:
            sys.exit("chromium not found: apt-get install -y chromium")
        self.profile = tempfile.mkdtemp(prefix="console-browser.")
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()

        def fds():
            os.dup2(to_r, 3)
            os.dup2(from_w, 4)

        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--remote-debugging-pipe", f"--user-data-dir={self.profile}", "--window-size=1280,900", "about:blank"],
            preexec_fn=fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        self.w = os.fdopen(to_w, "wb", buffering=0)
        self.r = os.fdopen(from_r, "rb", buffering=0)
        self.buf = b""
        self.next_id = 0
        self.events = []

    def _read(self):
        while b"\0" not in self.buf:
            chunk = self.r.read(65536)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method, params=None, session=None, timeout=20):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.w.write(json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = self._read()
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)
        raise RuntimeError(f"{method}: no answer in {timeout} s")

    def wait_event(self, name, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            for i, e in enumerate(self.events):
                if e.get("method") == name:
                    return self.events.pop(i)
            self.events.append(self._read())
        raise RuntimeError(f"no {name} in {timeout} s")

    def page(self, context=None):
        params = {"url": "about:blank"}
        if context:
            params["browserContextId"] = context
        target = self.send("Target.createTarget", params)["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime"):
            self.send(f"{domain}.enable", session=session)
        return Page(self, session)

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    def __init__(self, browser, session):
        self.b, self.s = browser, session

    def go(self, path):
        self.b.events = [e for e in self.b.events if e.get("method") != "Page.loadEventFired"]
        self.b.send("Page.navigate", {"url": url + path}, session=self.s)
        self.b.wait_event("Page.loadEventFired")

    def js(self, expression):
        r = self.b.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, session=self.s)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def submit(self, expression):
        """Runs `expression` (which submits a form) and waits for the page it loads."""
        self.b.events = [e for e in self.b.events if e.get("method") != "Page.loadEventFired"]
        self.js(expression)
        self.b.wait_event("Page.loadEventFired")

    def shot(self, name):
        data = self.b.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session=self.s)["data"]
        path = os.path.join(out, name)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        width = self.js("document.documentElement.scrollWidth")
        check(width <= 1280, f"{name}: the page fits a 1280-pixel screen (scrollWidth {width})")
        return path


def redis(*args):
    return subprocess.run(["redis-cli", *redis_cli, *args], capture_output=True, text=True, check=True).stdout


os.makedirs(out, exist_ok=True)
b = Browser()
try:
    # Another browser context (no cookies): an action without the token is refused.
    stranger = b.page(b.send("Target.createBrowserContext")["browserContextId"])
    stranger.go("/deadletters")
    status = stranger.js("fetch('/deadletters/action', {method: 'POST', body: new URLSearchParams({do: 'discard', id: '1-1'})}).then(r => r.status)")
    check(status == 401, f"an action without the token is refused ({status})")

    p = b.page()
    p.go("/login")
    p.submit(f"document.querySelector('input[name=token]').value = {json.dumps(token)}; document.forms[0].submit()")
    check(p.js("location.pathname") == "/" and "operator" in p.js("document.querySelector('header').innerText"),
          "signing in with the token leads to the overview")
    headers = p.js("[...document.querySelectorAll('#live table th')].map(t => t.innerText.trim().toLowerCase())")
    text = p.js("document.getElementById('live').innerText")
    check("lag" in headers and "pending" in headers and ":feed:sports" in text, f"the overview shows the streams with lag and pending ({headers[:6]})")
    check("ready" in text and "/metrics" in text, "the overview shows the worker found through its Service's address, ready")
    stamp = p.js("document.getElementById('stamp').innerText")
    time.sleep(float(os.environ.get("REFRESH_SECONDS", "3")) * 2 + 1)
    again = p.js("document.getElementById('stamp').innerText")
    check(again != stamp and p.js("performance.getEntriesByType('navigation').length") == 1,
          f"the overview refreshed itself without a reload ({stamp!r} → {again!r})")
    p.shot("overview.png")

    p.go(f"/keys/{key}")
    body = p.js("document.body.innerText")
    check(device in body and p.js(f"!!document.querySelector('a[href$=\"/devices/{device}\"]')"), f"the key's page lists device {device}")
    events = p.js("[...document.querySelectorAll('h2')].map(h => h.innerText).find(t => t.startsWith('Trail')) || ''")
    check(events.startswith("Trail: ") and not events.startswith("Trail: 0 "), f"the key's page lists its events ({events})")
    check("<script>" in body and "<img src=x" in body and p.js("window.__pwned === undefined") and not any(e.get("method") == "Page.javascriptDialogOpening" for e in b.events),
          "a team name with <script> and a player with <img onerror> show as text and run nothing")
    p.shot("key.png")

    p.go(f"/keys/{key}/devices/{device}")
    check("Pushes: " in p.js("document.body.innerText"), "the device's page shows its pushes")
    p.shot("device.png")

    p.go("/deadletters")
    letter = p.js("(document.querySelector('input[name=id]') || {}).value")
    check(bool(letter), f"the dead letters page lists a letter with a checkbox ({letter})")
    p.shot("deadletters.png")
    if letter:
        p.go(f"/deadletters/{letter}")
        p.shot("deadletter.png")
        p.submit("document.querySelector('button[value=replay]').click()")
        flash = p.js("(document.querySelector('.flash') || {}).innerText || ''")
        check(flash.startswith("Replayed 1 of 1."), f"replaying from its page ({flash!r})")
        found = letter in redis("--no-raw", "XREVRANGE", os.environ.get("FEED_STREAM", "demo:feed:sports"), "+", "-", "COUNT", "50")
        check(found, "the replayed entry reached its stream (x-replayed-from the letter)")

    for path, name in (("/budgets", "budgets.png"), ("/channels", "channels.png"), ("/keys", "keys.png")):
        p.go(path)
        p.shot(name)
finally:
    b.close()

print(f"screenshots in {out}")
sys.exit(1 if failures else 0)
