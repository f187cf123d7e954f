"""Self-signed certificates for the test control plane: one CA, serving certificates for the API server and the
fake kubelet, and client certificates whose subject is the identity (CN = user, O = groups), as kubeadm issues them.

A client certificate for ``system:serviceaccount:NS:NAME`` (group ``system:serviceaccounts``) authenticates as
that service account, so RBAC is checked exactly as for a pod's token: the tests act as Airflow's worker or as the
runner with only the rights the chart gives them.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())  # P-256: fast to make, accepted by Go's TLS and JWT signing


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name(attrs + [x509.NameAttribute(NameOID.COMMON_NAME, cn)])


class Pki:
    """A CA in ``folder``; ``issue`` writes NAME.crt and NAME.key signed by it and returns their paths."""

    def __init__(self, folder: Path, days: int = 1):
        self.folder = folder
        self.days = days
        folder.mkdir(parents=True, exist_ok=True)
        self._ca_key = _key()
        now = dt.datetime.now(dt.UTC)
        ca_name = _name("parathink-test-ca")
        self._ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
                    .public_key(self._ca_key.public_key()).serial_number(x509.random_serial_number())
                    .not_valid_before(now - dt.timedelta(minutes=5))
                    .not_valid_after(now + dt.timedelta(days=self.days))
                    .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                    .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                                 key_encipherment=False, data_encipherment=False,
                                                 key_agreement=False, key_cert_sign=True, crl_sign=True,
                                                 encipher_only=False, decipher_only=False), critical=True)
                    .sign(self._ca_key, hashes.SHA256()))
        self.ca_path = folder / "ca.crt"
        self.ca_path.write_bytes(self._ca.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, cn: str, orgs: tuple[str, ...] = (), server: bool = False,
              hosts: tuple[str, ...] = ()) -> tuple[Path, Path]:
        """NAME.crt/NAME.key for ``cn``; a serving certificate is valid for localhost, 127.0.0.1 and ``hosts``
        (names or IP addresses: the local cluster's bridge address, the API server's Service names)."""
        key = _key()
        now = dt.datetime.now(dt.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (x509.CertificateBuilder().subject_name(_name(cn, orgs)).issuer_name(self._ca.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(minutes=5))
                   .not_valid_after(now + dt.timedelta(days=self.days))
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if server:
            sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            for host in hosts:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    sans.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        crt, keyfile = self.folder / f"{name}.crt", self.folder / f"{name}.key"
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        keyfile.write_bytes(_pem_key(key))
        return crt, keyfile

    def signing_key(self, name: str) -> tuple[Path, Path]:
        """A bare key pair (the API server signs service-account tokens with it): NAME.key, NAME.pub."""
        key = _key()
        priv, pub = self.folder / f"{name}.key", self.folder / f"{name}.pub"
        priv.write_bytes(_pem_key(key))
        pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo))
        return priv, pub
