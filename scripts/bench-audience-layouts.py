#!/usr/bin/env python3
"""Redis CPU per token for reading a key's audience several ways, on a private redis-server.

The fan-out reads `{key}:meta` with HSCAN (docs/sending.md); this measures what the same tokens
would cost Redis kept otherwise: in pages filled in registration order (hashes of --page fields
read with HGETALL, or strings of --page packed values read with GET, four to a pipeline), in
pages chosen by a hash of the activity (the same count of pages, read with HGETALL), or in one
sorted set of `<hash> <activity> <value>` members (all of score 0), read in --page steps with
`ZRANGE … BYLEX LIMIT` from the last member read. Values are shaped like the meta the
registration writes (`ts device env tier broadcast token`), and the activities register in a
random order, as a real key's do: what is near in a layout's order was written at the same time
only where the layout keeps registration order. Figures are Redis's own CPU (INFO cpu, user +
sys) over each read of the whole audience, per token; the client's speed doesn't enter them; the
memory is `MEMORY USAGE` per token. Starts redis-server on a free loopback port and stops it by
PID on exit.

  python3 scripts/bench-audience-layouts.py [--tokens 100000] [--page 256] [--rounds 3]
"""
import argparse, hashlib, random, socket, subprocess, tempfile, time

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--tokens", type=int, default=100000)
ap.add_argument("--page", type=int, default=256, help="fields per page, and the HSCAN COUNT")
ap.add_argument("--rounds", type=int, default=3)
opts = ap.parse_args()

probe = socket.socket(); probe.bind(("127.0.0.1", 0)); port = probe.getsockname()[1]; probe.close()
workdir = tempfile.mkdtemp()
redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                          "--dir", workdir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    for _ in range(100):
        try: sock = socket.create_connection(("127.0.0.1", port)); break
        except OSError: time.sleep(0.05)
    reader = sock.makefile("rb")

    def encode(*args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        return out

    def reply():
        line = reader.readline(); kind, rest = line[:1], line[1:-2]
        if kind in (b"+", b"-"): return rest
        if kind == b":": return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else reader.read(n + 2)[:-2]
        if kind == b"*": return [reply() for _ in range(int(rest))]
        raise RuntimeError(f"unexpected reply {line!r}")

    def run(commands):
        sock.sendall(b"".join(encode(*c) for c in commands))
        return [reply() for _ in commands]

    def cpu():
        info = run([("INFO", "cpu")])[0].decode()
        fields = dict(l.split(":", 1) for l in info.split("\r\n") if ":" in l)
        return float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])

    rnd = random.Random(1)
    rows = [(b"%08x-4e5a-8c1d-%012x" % (rnd.getrandbits(32), rnd.getrandbits(48)),
             b"%d d%d development - 0 %064x" % (1732000000000 + i, i, rnd.getrandbits(256))) for i in range(opts.tokens)]
    place = {a: int.from_bytes(hashlib.sha1(a).digest()[:4], "big") for a, _ in rows}
    pages = (opts.tokens + opts.page - 1) // opts.page
    # Every layout is written in the one registration order, each row to all of them in turn.
    for i in range(0, opts.tokens, 1000):
        chunk = rows[i:i + 1000]
        run([("HSET", "meta") + tuple(x for r in chunk for x in r),
             ("ZADD", "lex") + tuple(x for a, m in chunk for x in (0, b"%08x %s %s" % (place[a], a, m)))]
            + [("HSET", f"hashed:{place[a] % pages}", a, m) for a, m in chunk])
    for p in range(pages):
        chunk = rows[p * opts.page:(p + 1) * opts.page]
        run([("HSET", f"page:{p}") + tuple(x for r in chunk for x in r),
             ("SET", f"packed:{p}", b"\n".join(a + b" " + m for a, m in chunk))])

    def hscan():
        cursor, n = b"0", 0
        while True:
            cursor, fields = run([("HSCAN", "meta", cursor, "COUNT", opts.page)])[0]
            n += len(fields) // 2
            if cursor == b"0": return n

    def bylex():
        start, n = b"-", 0
        while True:
            members = run([("ZRANGE", "lex", start, "+", "BYLEX", "LIMIT", 0, opts.page)])[0]
            n += len(members)
            if len(members) < opts.page: return n
            start = b"(" + members[-1]

    def paged(command, name, count):
        n = 0
        for first in range(0, pages, 4):
            for r in run([(command, f"{name}:{p}") for p in range(first, min(first + 4, pages))]): n += count(r)
        return n

    ways = [("HSCAN of one hash", hscan),
            ("HGETALL of pages", lambda: paged("HGETALL", "page", lambda r: len(r) // 2)),
            ("GET of packed pages", lambda: paged("GET", "packed", lambda r: r.count(b"\n") + 1)),
            ("HGETALL hashed pages", lambda: paged("HGETALL", "hashed", lambda r: len(r) // 2)),
            ("ZRANGE BYLEX", bylex)]
    def usage(*names):
        return sum(run([("MEMORY", "USAGE", n, "SAMPLES", 0) for n in names])) / opts.tokens
    print(f"{opts.tokens} tokens, pages of {opts.page}; encodings: meta {run([('OBJECT', 'ENCODING', 'meta')])[0].decode()}, "
          f"page {run([('OBJECT', 'ENCODING', 'page:0')])[0].decode()}, sorted set {run([('OBJECT', 'ENCODING', 'lex')])[0].decode()}")
    print(f"bytes per token: one hash {usage('meta'):.0f}, pages {usage(*[f'page:{p}' for p in range(pages)]):.0f}, "
          f"hashed pages {usage(*[f'hashed:{p}' for p in range(pages)]):.0f}, sorted set {usage('lex'):.0f}")
    results = {name: [] for name, _ in ways}
    for _ in range(opts.rounds):
        for name, read in ways:
            before = cpu(); n = read(); after = cpu()
            assert n == opts.tokens, f"{name} read {n} of {opts.tokens}"
            results[name].append((after - before) * 1e6 / n)
    for name, values in results.items():
        print(f"{name:22} Redis CPU per token: " + " / ".join(f"{v:.2f}" for v in values)
              + f" µs (median {sorted(values)[len(values) // 2]:.2f})")
finally:
    redis.terminate(); redis.wait()
