"""The Pod Security Standard "restricted" as a check of a pod spec (kubernetes.io/docs/concepts/security/
pod-security-standards, the checks of the "restricted" column and of "baseline" beneath it).

The tests' real API server is Kubernetes 1.20, which has no PodSecurity admission (alpha in 1.22, GA in 1.25),
so a namespace labelled ``pod-security.kubernetes.io/enforce=restricted`` there enforces nothing. This is the
standard's list written out, applied to every pod the project renders; ``test_podspec.py`` shows it rejecting the
pods rendered before the security context existed.
"""

from __future__ import annotations

from typing import Any

ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
                   "secret"}
ALLOWED_CAPABILITY = "NET_BIND_SERVICE"


def violations(spec: dict[str, Any]) -> list[str]:
    """What a pod ``spec`` (a Pod's ``spec``, or a template's) breaks of the restricted profile; [] when nothing."""
    out = []
    pod = spec.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag):
            out.append(f"spec.{flag}")
    for v in spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            out.append(f"volume {v['name']}: {sorted(kinds)}")
    if pod.get("runAsUser") == 0:
        out.append("spec.securityContext.runAsUser=0")
    for c in (spec.get("initContainers") or []) + spec["containers"]:
        sc, where = c.get("securityContext") or {}, f"container {c['name']}"
        if sc.get("privileged"):
            out.append(f"{where}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{where}: allowPrivilegeEscalation is not false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{where}: capabilities.drop lacks ALL")
        if set(caps.get("add") or []) - {ALLOWED_CAPABILITY}:
            out.append(f"{where}: capabilities.add {caps['add']}")
        if sc.get("runAsNonRoot", pod.get("runAsNonRoot")) is not True:
            out.append(f"{where}: runAsNonRoot is not true (pod or container)")
        if sc.get("runAsUser") == 0:
            out.append(f"{where}: runAsUser=0")
        seccomp = (sc.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{where}: seccompProfile is {seccomp!r}, not RuntimeDefault or Localhost")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            out.append(f"{where}: hostPort")
    return out
