#!/usr/bin/env python3
"""Checks the Compose examples for the mistakes that would only show when someone runs them.

    check-compose.py Deploy/compose.yaml [Deploy/compose-cluster.yaml …]

Per file: it is YAML with `services`; every `depends_on` names a service, with a condition
Compose knows; every ACTIVITYCAST_* variable of a service is a setting (the loader's table,
SettingsLoader.known: `worker.batch_size` is ACTIVITYCAST_WORKER_BATCH_SIZE); every seed of
ACTIVITYCAST_REDIS_URL is a service of the file (host:port, 6379 by default); with several seeds,
the file's Redis services run with `--cluster-enabled yes` (several seeds of a single Redis are
refused by the worker). Named volumes and secrets a service uses are declared. Exit 1 on any
problem. Needs PyYAML.
"""
import os
import re
import sys

import yaml

CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


def settings():
    """The settings' keys, from the loader's own table (`SettingsLoader.known`)."""
    here = os.path.dirname(os.path.abspath(__file__))
    text = open(os.path.join(here, "..", "Sources", "ActivityCastSettings", "Settings.swift"), encoding="utf-8").read()
    table = text[text.index("static let known"):]
    table = table[:table.index("static let budgetAudiences")]
    keys = re.findall(r'^\s+\("([a-z0-9_.]+)", ', table, re.M)
    return {"ACTIVITYCAST_" + k.upper().replace(".", "_") for k in keys}


def environment(service):
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return env


def check(path, known):
    problems = []
    doc = yaml.safe_load(open(path, encoding="utf-8"))
    services = (doc or {}).get("services")
    if not isinstance(services, dict) or not services:
        return [f"{path}: no services"]
    volumes = set((doc.get("volumes") or {}).keys())
    secrets = set((doc.get("secrets") or {}).keys())
    for name, service in services.items():
        where = f"{path}: services.{name}"
        deps = service.get("depends_on") or {}
        for dep, how in (deps.items() if isinstance(deps, dict) else ((d, {}) for d in deps)):
            if dep not in services:
                problems.append(f"{where}.depends_on: no service {dep!r}")
            condition = (how or {}).get("condition", "service_started")
            if condition not in CONDITIONS:
                problems.append(f"{where}.depends_on.{dep}: unknown condition {condition!r}")
        for volume in service.get("volumes") or []:
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume.get("source")
            if source and not source.startswith((".", "/")) and source not in volumes:
                problems.append(f"{where}.volumes: named volume {source!r} is not declared under volumes")
        for secret in service.get("secrets") or []:
            if (secret if isinstance(secret, str) else secret.get("source")) not in secrets:
                problems.append(f"{where}.secrets: {secret!r} is not declared under secrets")
        env = environment(service)
        for var in env:
            # (budgets.<audience>.<field> are made per audience: not checked one by one.)
            if var.startswith("ACTIVITYCAST_") and var not in known and not var.startswith("ACTIVITYCAST_" + "BUDGETS_"):
                problems.append(f"{where}.environment: {var} is no setting (docs/configuration.md lists them)")
        url = env.get("ACTIVITYCAST_REDIS_URL")
        if url:
            rest = re.sub(r"^rediss?://", "", url).split("/", 1)[0].split("@")[-1]
            seeds = [s.strip() for s in rest.split(",") if s.strip()]
            for seed in seeds:
                host, _, port = seed.partition(":")
                if host not in services:
                    problems.append(f"{where}: ACTIVITYCAST_REDIS_URL names {host!r}, which is no service of this file")
                if port and not port.isdigit():
                    problems.append(f"{where}: ACTIVITYCAST_REDIS_URL seed {seed!r} has no numeric port")
            if len(seeds) > 1:
                for seed in seeds:
                    node = services.get(seed.partition(":")[0]) or {}
                    command = node.get("command")
                    text = " ".join(command) if isinstance(command, list) else str(command or "")
                    if "--cluster-enabled yes" not in text:
                        problems.append(f"{where}: several Redis seeds, but {seed} does not run with --cluster-enabled yes")
            shards = env.get("ACTIVITYCAST_STREAMS_SHARDS")
            if shards is not None and not (str(shards).isdigit() and 1 <= int(shards) <= 1024):
                problems.append(f"{where}: ACTIVITYCAST_STREAMS_SHARDS must be 1…1024, got {shards!r}")
    return problems


def main(paths):
    if not paths:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    known = settings()
    failed = False
    for path in paths:
        problems = check(path, known)
        for p in problems:
            print(p)
        if not problems:
            print(f"{path}: ok")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
