#!/usr/bin/env python3
"""What each demo device shows, read from the APNs sandbox's device views (run-local.sh).

    demo_view.py SANDBOX_HOST:PORT CERT REDIS_CLI_ARGS... -- LABEL=KIND:TARGET ...
    demo_view.py stats SANDBOX_HOST:PORT CERT      # pushes by status and reason at the sandbox
    demo_view.py sent WORKER_LOG...                # what the workers sent, by kind
    demo_view.py started-key SANDBOX_HOST:PORT CERT START_TOKEN
                                                   # the key a push-to-start names (see below)

KIND is `token` (a device view) or `channel:<key>` (the key's broadcast channel, looked up in
Redis). With --final EXPECT (match score `2-1`, trip status `ended`) it checks every device ended
on the final state and exits 1 if one did not.

started-key is what an app does with a push-to-start: the started activity reads its attributes
(`matchId`, `tripId`: the id of the activity's key) and registers its update token for that key.
It reads the start the push-to-start token's device received back from the sandbox (waiting up to
10 s for it) and prints `KEY ATTRIBUTE=VALUE`, e.g. `match:4711 matchId=4711`; exits 1 when no
start naming a key arrived.
"""
import json
import subprocess
import sys
import time


def get(listen, cert, path):
    out = subprocess.run(["curl", "-s", "--http2", "--cacert", cert, "-w", "\n%{http_code}", f"https://{listen}{path}"],
                         capture_output=True, text=True, timeout=20).stdout
    body, _, code = out.rpartition("\n")
    return json.loads(body) if code == "200" else None


def describe(view):
    if view is None:
        return "(nothing yet)", None
    s = view.get("contentState") or {}
    if "homeScore" in s:
        text = f"{s.get('homeScore')}-{s.get('awayScore')}"
        if s.get("clock"):
            text += f"  {s['clock']}"
        if s.get("period"):
            text += f"  {s['period']}"
        last = s.get("lastEvent") or {}
        if last.get("kind"):
            text += f"  last: {last['kind']}" + (f" ({last['player']})" if last.get("player") else "")
    elif s:
        text = ", ".join(f"{k}={v}" for k, v in sorted(s.items()) if k not in ("etaDate",))
    else:
        text = "(started, no state yet)"
    alert = view.get("lastAlert") or {}
    if alert.get("title"):
        text += f'  [alert: {alert["title"]}]'
    return text, view


def stats(listen, cert):
    s = get(listen, cert, "/sandbox/stats") or {}
    print(f"  at the sandbox: device pushes {s.get('devicePushes')}, broadcasts {s.get('broadcasts')}, "
          f"channels created {s.get('channelsCreated')}, deleted {s.get('channelsDeleted')}")
    print(f"  by status {s.get('byStatus')}, refused by reason {s.get('byReason')}, "
          f"ignored by a device (older than what it shows, or after its end) {s.get('notDisplayed')}")
    print(f"  sent twice: states a device already showed {s.get('repeatedStates')}, "
          f"alerts a device already had for the event {s.get('repeatedAlerts')}")


def sent(paths):
    import collections
    import re
    c = collections.Counter()
    for path in paths:
        for line in open(path, encoding="utf-8", errors="replace"):
            if " sent " not in line:
                continue
            m = dict(re.findall(r"(\w+)=(\S+)", line))
            c[f"{m.get('event')} events"] += 1
            for k in ("broadcasts", "tokens", "starts", "forgotten", "failed"):
                c[k] += int(m.get(k, "0"))
            if m.get("stale") == "true":
                c["stale events (merged, not sent as themselves)"] += 1
    print("  per the workers: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))


# The attribute of a start that names its activity's id, and the key's kind (routes/*.yaml).
KEY_ATTRIBUTES = {"matchId": "match", "tripId": "trip"}


def started_key(listen, cert, token, wait=10.0):
    deadline = time.time() + wait
    while True:
        view = get(listen, cert, f"/sandbox/devices/{token}") or {}
        attributes = view.get("attributes") or {}
        for name, kind in KEY_ATTRIBUTES.items():
            value = attributes.get(name)
            if isinstance(value, str) and value:
                print(f"{kind}:{value} {name}={value}")
                return 0
        if time.time() >= deadline:
            print(f"no start naming its key (matchId, tripId) reached token {token[:8]}…; its view's attributes: "
                  f"{json.dumps(attributes)}", file=sys.stderr)
            return 1
        time.sleep(0.2)


def main():
    args = sys.argv[1:]
    if args[:1] == ["started-key"]:
        sys.exit(started_key(args[1], args[2], args[3]))
    if args[:1] == ["stats"]:
        return stats(args[1], args[2])
    if args[:1] == ["sent"]:
        return sent(args[1:])
    final = None
    if args[:1] == ["--final"]:
        final = json.loads(args[1])
        args = args[2:]
    listen, cert = args[0], args[1]
    split = args.index("--")
    redis_cli = args[2:split]
    devices = [a.split("=", 1) for a in args[split + 1:]]
    rows = []
    failures = []
    for label, spec in devices:
        kind, _, target = spec.partition(":")
        if kind == "channel":
            key = target
            env_key = f"{{{key}}}"
            prefix = next((a.split("=", 1)[1] for a in redis_cli if a.startswith("PREFIX=")), "demo")
            cli = [a for a in redis_cli if not a.startswith("PREFIX=")]
            raw = subprocess.run(["redis-cli", *cli, "HGET", f"{prefix}:{env_key}:channels", "development"],
                                 capture_output=True, text=True).stdout.strip()
            channel = raw.split(" ")[0] if raw else None
            view = get(listen, cert, f"/sandbox/channels/{channel}") if channel else None
            where = f"channel {channel[:10]}…" if channel else "channel (none yet)"
        else:
            view = get(listen, cert, f"/sandbox/devices/{target}")
            where = f"token {target[:8]}…"
        text, v = describe(view)
        event = (v or {}).get("state") or "-"
        starts = (v or {}).get("startsReceived") or 0
        rows.append((label, where, event + (f" (+{starts} start)" if starts else ""), text))
        if final is not None:
            expect = final.get(label)
            state = (v or {}).get("contentState") or {}
            if expect is not None and not (event == "ended" and all(state.get(k) == val for k, val in expect.items())):
                failures.append(label)
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("  " + "  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3])
    if final is not None:
        if failures:
            print(f"NOT every device ended on the final state: {', '.join(failures)}")
            sys.exit(1)
        print("every device ended on the final state")


if __name__ == "__main__":
    main()
