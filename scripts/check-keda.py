#!/usr/bin/env python3
"""Checks a KEDA ScaledObject with redis-streams (or redis-cluster-streams) triggers against KEDA's documented fields.

    check-keda.py FILE [--worker-config Deploy/activitycast.yaml] [--config-map Deploy/k8s/cluster/config.yaml]
                       [--deployment Deploy/k8s/worker.yaml]
    check-keda.py FILE --self-test     # also proves that each kind of mistake below is rejected

kubernetes-validate has no schema for the CRD, so this knows the fields itself, from
  https://keda.sh/docs/latest/reference/scaledobject-spec/        (spec, triggers)
  https://keda.sh/docs/latest/scalers/redis-streams/               (the single-node trigger's metadata)
  https://keda.sh/docs/latest/scalers/redis-cluster-streams/       (the cluster trigger's metadata)
--config-map: the workers' ConfigMap (ACTIVITYCAST_* variables), whose ACTIVITYCAST_PREFIX and
ACTIVITYCAST_STREAMS_SHARDS win over the worker config: with N shards every feed is N streams
<feed>:{0} … <feed>:{N-1}, each needing its trigger.
It rejects unknown and missing fields, wrong types (trigger metadata values are strings, numbers
in them must be whole numbers), and metadata KEDA would silently ignore (lagCount without
consumerGroup, streamLength with one). With --worker-config it also checks that the triggers
watch the streams and the consumer group the workers read (feeds, registrations, the two slices
streams); with --deployment, that scaleTargetRef names a Deployment there. Exit 1 on any problem.
Needs PyYAML.
"""
import copy
import re
import sys

import yaml

INT, STR, BOOL, MAP, QUANTITY = "integer", "string", "boolean", "mapping", "quantity"
# A tuple is an enumeration: the value must be one of its strings.

# spec.advanced.horizontalPodAutoscalerConfig.behavior is the HPA's own `behavior`
# (autoscaling/v2 HorizontalPodAutoscalerBehavior), passed through by KEDA.
HPA_RULES = {"stabilizationWindowSeconds": INT, "selectPolicy": ("Max", "Min", "Disabled"),
             "tolerance": QUANTITY,
             "policies": [{"type": ("Pods", "Percent"), "value": INT, "periodSeconds": INT}]}
SPEC = {
    "scaleTargetRef": {"apiVersion": STR, "kind": STR, "name": STR, "envSourceContainerName": STR},
    "pollingInterval": INT,
    "cooldownPeriod": INT,
    "initialCooldownPeriod": INT,
    "idleReplicaCount": INT,
    "minReplicaCount": INT,
    "maxReplicaCount": INT,
    "fallback": {"failureThreshold": INT, "replicas": INT,
                 "behavior": ("static", "currentReplicas", "currentReplicasIfHigher", "currentReplicasIfLower")},
    "advanced": {
        "restoreToOriginalReplicaCount": BOOL,
        "horizontalPodAutoscalerConfig": {"name": STR, "behavior": {"scaleUp": HPA_RULES, "scaleDown": HPA_RULES}},
        "scalingModifiers": {"target": STR, "activationTarget": STR, "metricType": ("AverageValue", "Value"), "formula": STR},
    },
    "triggers": [{"type": STR, "metadata": MAP, "name": STR, "useCachedMetrics": BOOL,
                  "authenticationRef": {"name": STR, "kind": ("TriggerAuthentication", "ClusterTriggerAuthentication")},
                  "metricType": ("AverageValue", "Value", "Utilization")}],
}
REQUIRED = {"spec": ["scaleTargetRef", "triggers"], "spec.scaleTargetRef": ["name"],
            "spec.fallback": ["failureThreshold", "replicas"], "spec.advanced.scalingModifiers": ["target", "formula"],
            "spec.triggers[]": ["type", "metadata"], "spec.triggers[].authenticationRef": ["name"]}
METADATA = {"name": STR, "namespace": STR, "labels": MAP, "annotations": MAP}

# redis-streams trigger metadata: every value is a string; these must hold whole numbers or booleans.
REDIS_STREAMS = {
    "address": STR, "host": STR, "port": INT, "usernameFromEnv": STR, "passwordFromEnv": STR,
    "stream": STR, "consumerGroup": STR, "pendingEntriesCount": INT, "streamLength": INT,
    "lagCount": INT, "activationLagCount": INT, "enableTLS": BOOL, "unsafeSsl": BOOL,
    "databaseIndex": INT, "addressFromEnv": STR, "hostFromEnv": STR, "portFromEnv": STR,
}

# redis-cluster-streams: the node list instead of one address; no databaseIndex on a cluster.
REDIS_CLUSTER_STREAMS = {k: v for k, v in REDIS_STREAMS.items()
                         if k not in ("address", "host", "port", "addressFromEnv", "hostFromEnv", "portFromEnv", "databaseIndex")}
REDIS_CLUSTER_STREAMS.update({"addresses": STR, "hosts": STR, "ports": STR,
                              "addressesFromEnv": STR, "hostsFromEnv": STR, "portsFromEnv": STR})


def type_ok(value, kind):
    if isinstance(kind, tuple):
        return value in kind
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == STR:
        return isinstance(value, str)
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == MAP:
        return isinstance(value, dict)
    if kind == QUANTITY:  # a Kubernetes quantity: a number or a string such as "0.1"
        return isinstance(value, (int, float, str)) and not isinstance(value, bool)
    raise ValueError(kind)


def describe(kind):
    if isinstance(kind, tuple):
        return "one of " + ", ".join(kind)
    return ("an " if kind[0] in "aeiou" else "a ") + kind


def walk(value, schema, path, problems):
    """Checks value against schema (a type, a dict of fields, or a one-item list of a schema)."""
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            problems.append(f"{path}: must be a mapping, got {type(value).__name__}")
            return
        for key, sub in value.items():
            if key not in schema:
                problems.append(f"{path}.{key}: unknown field (known: {', '.join(schema)})")
            else:
                walk(sub, schema[key], f"{path}.{key}", problems)
        for key in REQUIRED.get(re.sub(r"\[\d+\]", "[]", path), []):
            if key not in value:
                problems.append(f"{path}.{key}: missing (required)")
        return
    if isinstance(schema, list):
        if not isinstance(value, list) or not value:
            problems.append(f"{path}: must be a non-empty list")
            return
        for i, item in enumerate(value):
            walk(item, schema[0], f"{path}[{i}]", problems)
        return
    if not type_ok(value, schema):
        problems.append(f"{path}: must be {describe(schema)}, got {value!r}")


def check_redis_streams(meta, path, problems, cluster=False):
    known, type_name = (REDIS_CLUSTER_STREAMS, "redis-cluster-streams") if cluster else (REDIS_STREAMS, "redis-streams")
    for key, value in meta.items():
        if key not in known:
            problems.append(f"{path}.{key}: unknown {type_name} field (known: {', '.join(known)})")
            continue
        if not isinstance(value, str):
            problems.append(f"{path}.{key}: trigger metadata values are strings (quote it), got {value!r}")
            continue
        kind = known[key]
        if kind == INT and not (value.isdigit() or key == "port" and value.startswith("$")):
            problems.append(f"{path}.{key}: must be a whole number in a string, got {value!r}")
        if kind == BOOL and value not in ("true", "false"):
            problems.append(f"{path}.{key}: must be \"true\" or \"false\", got {value!r}")
    if "stream" not in meta:
        problems.append(f"{path}.stream: missing (required)")
    if cluster:
        if not ({"addresses", "addressesFromEnv", "hosts", "hostsFromEnv"} & meta.keys()):
            problems.append(f"{path}: needs addresses, addressesFromEnv, hosts or hostsFromEnv")
        if ("hosts" in meta or "hostsFromEnv" in meta) and not ({"ports", "portsFromEnv"} & meta.keys()):
            problems.append(f"{path}: hosts needs ports or portsFromEnv")
        for node in (meta.get("addresses") or "").split(","):
            if "addresses" in meta and not re.fullmatch(r"\s*[A-Za-z0-9.\-]+:\d+\s*", node):
                problems.append(f"{path}.addresses: each node is host:port, got {node!r}")
        if isinstance(meta.get("hosts"), str) and isinstance(meta.get("ports"), str) \
                and len(meta["hosts"].split(",")) != len(meta["ports"].split(",")):
            problems.append(f"{path}: hosts and ports must pair up one to one")
    else:
        if not ({"address", "addressFromEnv", "host", "hostFromEnv"} & meta.keys()):
            problems.append(f"{path}: needs address, addressFromEnv, host or hostFromEnv")
        if ("host" in meta or "hostFromEnv" in meta) and not ({"port", "portFromEnv"} & meta.keys()):
            problems.append(f"{path}: host needs port or portFromEnv")
    group = "consumerGroup" in meta
    if "lagCount" in meta and not group:
        problems.append(f"{path}.lagCount: ignored without consumerGroup (the scaler would use streamLength)")
    if "lagCount" in meta and "activationLagCount" not in meta:
        problems.append(f"{path}.activationLagCount: missing (the docs require it with lagCount)")
    if "streamLength" in meta and group:
        problems.append(f"{path}.streamLength: ignored with consumerGroup")
    if "pendingEntriesCount" in meta and "lagCount" in meta:
        problems.append(f"{path}.pendingEntriesCount: ignored when lagCount is set")


def check(doc, worker_config=None, deployments=None, config_map=None):
    problems = []
    if not isinstance(doc, dict):
        return ["the document is not a mapping"]
    if doc.get("apiVersion") != "keda.sh/v1alpha1":
        problems.append(f"apiVersion: must be keda.sh/v1alpha1, got {doc.get('apiVersion')!r}")
    if doc.get("kind") != "ScaledObject":
        problems.append(f"kind: must be ScaledObject, got {doc.get('kind')!r}")
    for key in doc:
        if key not in ("apiVersion", "kind", "metadata", "spec"):
            problems.append(f"{key}: unknown top-level field")
    walk(doc.get("metadata"), METADATA, "metadata", problems)
    if not isinstance((doc.get("metadata") or {}).get("name"), str):
        problems.append("metadata.name: missing (required)")
    spec = doc.get("spec")
    walk(spec, SPEC, "spec", problems)
    if not isinstance(spec, dict):
        return problems
    lo, hi = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
    if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
        problems.append(f"spec: minReplicaCount ({lo}) above maxReplicaCount ({hi})")
    idle = spec.get("idleReplicaCount")
    if isinstance(idle, int) and isinstance(lo, int) and idle >= lo:
        problems.append(f"spec.idleReplicaCount: must be below minReplicaCount ({lo})")
    triggers = spec.get("triggers") if isinstance(spec.get("triggers"), list) else []
    watched = {}
    for i, trigger in enumerate(triggers):
        if not isinstance(trigger, dict):
            continue
        kind = trigger.get("type")
        if kind in ("redis-streams", "redis-cluster-streams") and isinstance(trigger.get("metadata"), dict):
            meta = trigger["metadata"]
            check_redis_streams(meta, f"spec.triggers[{i}].metadata", problems, cluster=kind == "redis-cluster-streams")
            watched[meta.get("stream")] = meta.get("consumerGroup")
        elif kind is not None:
            problems.append(f"spec.triggers[{i}].type: {kind!r}: the workers' streams are watched by redis-streams or redis-cluster-streams")
    kinds = {t.get("type") for t in triggers if isinstance(t, dict)}
    if len(kinds) > 1:
        problems.append(f"spec.triggers: one Redis is either a single node or a cluster, not both ({', '.join(sorted(map(str, kinds)))})")
    names = [t.get("name") for t in triggers if isinstance(t, dict) and t.get("name")]
    if len(names) != len(set(names)):
        problems.append("spec.triggers: trigger names must be unique")
    target = (spec.get("scaleTargetRef") or {}).get("name")
    if deployments is not None and target not in deployments:
        problems.append(f"spec.scaleTargetRef.name: no Deployment {target!r} (found: {', '.join(sorted(deployments)) or 'none'})")
    if worker_config is not None:
        env = (config_map or {}).get("data") or {}
        prefix = env.get("ACTIVITYCAST_PREFIX") or worker_config.get("prefix") or "ac"
        group = env.get("ACTIVITYCAST_GROUP") or worker_config.get("group") or "activitycast"
        streams = worker_config.get("streams") or {}
        shards = int(env.get("ACTIVITYCAST_STREAMS_SHARDS") or streams.get("shards") or 1)
        feeds = [f.get("stream") for f in streams.get("feeds") or []]
        expected = [f"{f}:{{{i}}}" for f in feeds for i in range(shards)] if shards > 1 else feeds
        expected.append(streams.get("registrations") or f"{prefix}:registrations")
        expected += [f"{prefix}:slices", f"{prefix}:slices:5"]
        for stream in expected:
            if stream not in watched:
                problems.append(f"spec.triggers: no trigger watches {stream}, a stream the workers read")
            elif watched[stream] != group:
                problems.append(f"spec.triggers: the trigger on {stream} names group {watched[stream]!r}, the workers' is {group!r}")
        for stream in watched:
            if stream not in expected:
                problems.append(f"spec.triggers: {stream} is not a stream the workers read")
    return problems


def mistakes(doc):
    """Each kind of mistake the checker must catch, as (description, broken copy)."""
    def broken(description, change):
        d = copy.deepcopy(doc)
        change(d)
        return description, d
    t0 = lambda d: d["spec"]["triggers"][0]
    return [
        broken("an unknown spec field", lambda d: d["spec"].update(pollingIntervall=10)),
        broken("an unknown trigger metadata field", lambda d: t0(d)["metadata"].update(lagcount="5")),
        broken("an unknown trigger field", lambda d: t0(d).update(metricName="x")),
        broken("a missing stream", lambda d: t0(d)["metadata"].pop("stream")),
        broken("a missing address", lambda d: [t0(d)["metadata"].pop(k, None) for k in ("address", "addresses")]),
        broken("a missing scaleTargetRef.name", lambda d: d["spec"]["scaleTargetRef"].pop("name")),
        broken("a missing triggers list", lambda d: d["spec"].pop("triggers")),
        broken("lagCount as a number, not a string", lambda d: t0(d)["metadata"].update(lagCount=1000)),
        broken("lagCount not a whole number", lambda d: t0(d)["metadata"].update(lagCount="lots")),
        broken("minReplicaCount as a string", lambda d: d["spec"].update(minReplicaCount="2")),
        broken("pollingInterval as a string", lambda d: d["spec"].update(pollingInterval="10s")),
        broken("enableTLS not a boolean string", lambda d: t0(d)["metadata"].update(enableTLS="yes")),
        broken("lagCount without consumerGroup", lambda d: t0(d)["metadata"].pop("consumerGroup")),
        broken("minReplicaCount above maxReplicaCount", lambda d: d["spec"].update(minReplicaCount=50, maxReplicaCount=5)),
        broken("a wrong kind", lambda d: d.update(kind="ScaledJob")),
        broken("an HPA policy of an unknown type", lambda d: d["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["policies"][0].update(type="Replicas")),
        broken("a trigger on a stream the workers don't read", lambda d: t0(d)["metadata"].update(stream="ac:feed:sport")),
        broken("the wrong consumer group", lambda d: t0(d)["metadata"].update(consumerGroup="workers")),
        broken("a scale target that is not the worker Deployment", lambda d: d["spec"]["scaleTargetRef"].update(name="activitycast")),
        broken("a stream the workers read left without a trigger", lambda d: d["spec"]["triggers"].pop()),
    ] + ([
        broken("a single-node field on a cluster trigger", lambda d: t0(d)["metadata"].update(address="redis-0:6379")),
        broken("databaseIndex on a cluster trigger", lambda d: t0(d)["metadata"].update(databaseIndex="1")),
        broken("a node without its port", lambda d: t0(d)["metadata"].update(addresses="redis-0:6379,redis-1")),
        broken("a single-node trigger beside cluster ones", lambda d: t0(d).update(type="redis-streams")),
    ] if t0(doc).get("type") == "redis-cluster-streams" else [
        broken("a cluster field on a single-node trigger", lambda d: t0(d)["metadata"].update(addresses="redis-0:6379")),
    ])


def main(argv):
    args = list(argv)
    self_test = "--self-test" in args
    if self_test:
        args.remove("--self-test")
    worker_config = deployments = config_map = None
    if "--config-map" in args:
        i = args.index("--config-map")
        config_map = next((d for d in yaml.safe_load_all(open(args[i + 1], encoding="utf-8"))
                           if isinstance(d, dict) and d.get("kind") == "ConfigMap"), None)
        del args[i:i + 2]
    if "--worker-config" in args:
        i = args.index("--worker-config")
        worker_config = yaml.safe_load(open(args[i + 1], encoding="utf-8")) or {}
        del args[i:i + 2]
    if "--deployment" in args:
        i = args.index("--deployment")
        deployments = {d["metadata"]["name"] for d in yaml.safe_load_all(open(args[i + 1], encoding="utf-8"))
                       if isinstance(d, dict) and d.get("kind") == "Deployment"}
        del args[i:i + 2]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    docs = [d for d in yaml.safe_load_all(open(args[0], encoding="utf-8")) if d is not None]
    failed = False
    for doc in docs:
        name = (doc.get("metadata") or {}).get("name") if isinstance(doc, dict) else None
        problems = check(doc, worker_config, deployments, config_map)
        for p in problems:
            print(f"{args[0]}: ScaledObject {name}: {p}")
        failed |= bool(problems)
        if not problems:
            print(f"{args[0]}: ScaledObject {name}: ok ({len(doc['spec']['triggers'])} triggers)")
        if self_test:
            caught = 0
            for description, bad in mistakes(doc):
                if check(bad, worker_config, deployments, config_map):
                    caught += 1
                else:
                    print(f"self-test: {description} was NOT rejected")
                    failed = True
            print(f"self-test: {caught} of {len(mistakes(doc))} kinds of mistake rejected")
    if not docs:
        print(f"{args[0]}: no documents")
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
