#!/usr/bin/env python3
"""Turns the Kubernetes manifests under Deploy/k8s into what `podman kube play` can run on one
machine, for scripts/test-deploy.sh. The manifests themselves stay as they are (and are the ones
kubernetes-validate checks); only this copy changes:

  - every pod on the host network, listening on 127.0.0.1 only (Redis, the sandbox, each
    worker's ops endpoints on a free port of its own: two workers of one Deployment share the
    host's ports), and the settings pointing there instead of at Services;
  - Services and PodDisruptionBudgets left out (no cluster to route or evict);
  - container ports left out: podman refuses port mappings on the host network;
  - probes left out: podman 4.3 turns an httpGet probe into `curl` run inside the container,
    and the image has neither curl nor a shell (test-deploy.sh polls /readyz itself);
  - Secrets handed over as ConfigMaps of the same content: podman 4.3's kube play turns a Secret
    into a podman secret, but then writes its `data` into the mounted files still base64-encoded
    and ignores `stringData`; ConfigMap volumes it writes correctly (both become files, mode
    0644 in a named volume, which test-deploy.sh removes);
  - Redis's image replaced by one made from Debian's redis-server package (no registry here);
  - every name given SUFFIX (pods, config maps, volumes), so that what the run makes is its own
    and can be removed by name.

    k8s-podman-overlay.py --suffix S --redis-port P --sandbox-port Q --redis-image IMAGE FILE... > play.yaml
Needs PyYAML.
"""
import argparse
import base64
import sys

import yaml


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--suffix", required=True)
    ap.add_argument("--redis-port", type=int, required=True)
    ap.add_argument("--sandbox-port", type=int, required=True)
    ap.add_argument("--redis-image", required=True)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    docs = [d for f in a.files for d in yaml.safe_load_all(open(f, encoding="utf-8")) if d]
    renamed = lambda name: f"{name}{a.suffix}"
    out = []
    for d in docs:
        kind = d["kind"]
        if kind in ("Service", "PodDisruptionBudget"):
            continue
        if kind not in ("ConfigMap", "Secret", "Deployment"):
            sys.exit(f"k8s-podman-overlay.py: unexpected kind {kind}")
        d["metadata"]["name"] = renamed(d["metadata"]["name"])
        if kind == "Secret":
            files = {k: base64.b64decode(v).decode() for k, v in (d.get("data") or {}).items()}
            files.update(d.get("stringData") or {})
            d = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": d["metadata"], "data": files}
            kind = "ConfigMap"
        if kind == "ConfigMap" and d["metadata"]["name"] == renamed("activitycast-config"):
            d["data"].update({
                "ACTIVITYCAST_REDIS_URL": f"redis://127.0.0.1:{a.redis_port}",
                "ACTIVITYCAST_APNS_ENDPOINT": f"127.0.0.1:{a.sandbox_port}",
                "ACTIVITYCAST_OPS_LISTEN": "127.0.0.1:0",
            })
        if kind != "Deployment":
            out.append(d)
            continue
        pod = d["spec"]["template"]["spec"]
        pod["hostNetwork"] = True
        for v in pod.get("volumes", []):
            # Podman makes named volumes of them (emptyDir ones by the volume's own name).
            v["name"] = renamed(v["name"])
            if "secret" in v:
                secret = v.pop("secret")
                v["configMap"] = {"name": secret["secretName"], "optional": secret.get("optional", False)}
            if "configMap" in v:
                v["configMap"]["name"] = renamed(v["configMap"]["name"])
        for c in pod["containers"]:
            for field in ("ports", "livenessProbe", "readinessProbe", "startupProbe"):
                c.pop(field, None)
            for mount in c.get("volumeMounts", []):
                mount["name"] = renamed(mount["name"])
            for src in c.get("envFrom", []):
                if "configMapRef" in src:
                    src["configMapRef"]["name"] = renamed(src["configMapRef"]["name"])
            if c["name"] == "redis":
                c["image"] = a.redis_image
                c["args"] = c["args"] + ["--bind", "127.0.0.1", "--port", str(a.redis_port)]
            if c["name"] == "sandbox":
                c["args"] = [f"--listen=127.0.0.1:{a.sandbox_port}" if x.startswith("--listen=") else x for x in c["args"]]
        out.append(d)
    yaml.safe_dump_all(out, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
