#!/usr/bin/env bash
# Prints, for local use with the sandbox only, the Secrets and ConfigMap that sandbox.yaml and
# the workers (with local/config.yaml) need, made fresh each time:
#   Secret activitycast-apns           AuthKey.p8: a throwaway ES256 key (PKCS#8), never Apple's
#   Secret activitycast-sandbox-tls    tls.crt/tls.key: a self-signed certificate for the sandbox
#                                      (activitycast-sandbox, localhost, 127.0.0.1)
#   ConfigMap activitycast-apns-ca     ca.crt: that certificate, which the workers trust
#   bash Deploy/k8s/local/make-secrets.sh > /tmp/activitycast-local-secrets.yaml
#   kubectl apply -f /tmp/activitycast-local-secrets.yaml
# Needs openssl. Nothing is written but to stdout; keep the output out of the repository.
set -euo pipefail
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$tmp/AuthKey.p8" 2>/dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
  -keyout "$tmp/tls.key" -out "$tmp/tls.crt" -subj /CN=activitycast-sandbox \
  -addext "subjectAltName=DNS:activitycast-sandbox,DNS:localhost,IP:127.0.0.1" 2>/dev/null
indent() { sed 's/^/    /' "$1"; }
# stringData (plain text), not data (base64): Kubernetes takes either, and podman 4.3's kube play
# writes data values into the mounted files still base64-encoded.
cat <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: activitycast-apns
  labels:
    app.kubernetes.io/name: activitycast
type: Opaque
stringData:
  AuthKey.p8: |
$(indent "$tmp/AuthKey.p8")
---
apiVersion: v1
kind: Secret
metadata:
  name: activitycast-sandbox-tls
  labels:
    app.kubernetes.io/name: activitycast
type: kubernetes.io/tls
stringData:
  tls.crt: |
$(indent "$tmp/tls.crt")
  tls.key: |
$(indent "$tmp/tls.key")
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: activitycast-apns-ca
  labels:
    app.kubernetes.io/name: activitycast
data:
  ca.crt: |
$(indent "$tmp/tls.crt")
YAML
