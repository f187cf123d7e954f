"""Stand-in for the cluster's DNS (CoreDNS) of the local cluster: Debian's kubernetes source has no DNS server, and
no registry is reachable to pull CoreDNS's image. It answers what pods of parathink ask: the A record of a Service,
``<service>.<namespace>.svc.cluster.local`` -> its ClusterIP, read from the API server; every other name is
forwarded to the host's resolver. UDP only, A records only (AAAA and others of the cluster's domain: no data).

    python cluster_dns.py LISTEN_IP KUBECONFIG      (local_cluster.py starts it; the kubelet's clusterDNS names it)
"""

from __future__ import annotations

import socket
import struct
import sys
import time

DOMAIN = ".svc.cluster.local"
TTL_S = 5


def parse_question(packet: bytes) -> tuple[str, int, int]:
    """(name, qtype, offset after the question) of a query's first question."""
    labels, i = [], 12
    while packet[i]:
        n = packet[i]
        labels.append(packet[i + 1:i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    qtype = struct.unpack("!H", packet[i + 1:i + 3])[0]
    return ".".join(labels).lower(), qtype, i + 5


def answer(packet: bytes, ip: str | None, end: int, found: bool) -> bytes:
    """The reply to ``packet``: one A record for ``ip``, an empty NOERROR (found, no A) or NXDOMAIN."""
    flags = 0x8180 | (0 if found else 3)  # response, recursion desired + available; rcode
    count = 1 if ip else 0
    header = packet[:2] + struct.pack("!HHHHH", flags, 1, count, 0, 0)
    body = packet[12:end]
    if ip:
        body += b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, TTL_S, 4) + socket.inet_aton(ip)
    return header + body


def encode_query(name: str, ident: int = 0x5054) -> bytes:
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.strip(".").split(".")) + b"\0"
    return struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + qname + struct.pack("!HH", 1, 1)


def query(server: str, name: str, timeout: float = 2.0) -> str | None:
    """The first A record ``server`` gives for ``name`` (a test's and the readiness check's client)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        q = encode_query(name)
        s.sendto(q, (server, 53))
        reply, _ = s.recvfrom(4096)
    if struct.unpack("!H", reply[6:8])[0] == 0:
        return None
    return socket.inet_ntoa(reply[-4:])


def upstream() -> str:
    for line in open("/etc/resolv.conf"):
        if line.startswith("nameserver"):
            return line.split()[1]
    return "127.0.0.1"


class Services:
    """ClusterIPs by (namespace, name), listed from the API at most every TTL_S seconds."""

    def __init__(self, kubeconfig: str):
        from kubernetes import client, config
        self.core = client.CoreV1Api(config.new_client_from_config(kubeconfig))
        self.ips: dict[tuple[str, str], str] = {}
        self.read_at = 0.0

    def lookup(self, namespace: str, name: str) -> str | None:
        if (namespace, name) not in self.ips or time.monotonic() - self.read_at > TTL_S:
            self.ips = {(s.metadata.namespace, s.metadata.name): s.spec.cluster_ip
                        for s in self.core.list_service_for_all_namespaces().items
                        if s.spec.cluster_ip and s.spec.cluster_ip != "None"}
            self.read_at = time.monotonic()
        return self.ips.get((namespace, name))


def serve(listen: str, kubeconfig: str) -> None:
    services, forward_to = Services(kubeconfig), upstream()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((listen, 53))
    while True:
        packet, client = sock.recvfrom(4096)
        try:
            name, qtype, end = parse_question(packet)
            if name.endswith(DOMAIN):
                parts = name[: -len(DOMAIN)].split(".")
                ip = services.lookup(parts[1], parts[0]) if len(parts) == 2 else None
                reply = answer(packet, ip if qtype == 1 else None, end, found=ip is not None)
            else:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as up:
                    up.settimeout(3)
                    up.sendto(packet, (forward_to, 53))
                    reply, _ = up.recvfrom(4096)
            sock.sendto(reply, client)
        except Exception as e:
            print(f"dns: {e!r}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
