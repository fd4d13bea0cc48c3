"""A test certificate authority and one TLS certificate per party, for gateways on one machine or a
trial between organisations. Production uses the organisations' own PKI: any CA both sides trust, a
certificate per party whose subject alternative name is the party's name in ``federation.yaml``.

Keys are ECDSA P-256 (what gRPC's TLS stack handles fastest), made from the OS's entropy by
``cryptography``; a party's private key file is written readable by its owner only. Each certificate
names its party twice: as the subject's common name (how a gateway tells who called) and as a DNS
subject alternative name (how a caller checks it reached the party it meant, whatever the address).

Example
-------
>>> import tempfile
>>> folder = tempfile.mkdtemp()
>>> paths = write_test_certificates(folder, ["bank", "shop"])
>>> sorted(paths["shop"]), certificate_name(open(paths["shop"]["cert"], "rb").read())
(['ca', 'cert', 'key'], 'shop')
"""

from __future__ import annotations

import datetime
import os
import re
from dataclasses import dataclass
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ...errors import ConfigError

__all__ = ["Authority", "make_authority", "issue", "write_test_certificates", "certificate_name", "PARTY_NAME"]

PARTY_NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}$")  # a DNS label: it is the certificate's DNS name too
_VALID = datetime.timedelta(days=365)


@dataclass(frozen=True)
class Authority:
    """A certificate authority: its certificate and key, PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not PARTY_NAME.match(name):
        raise ConfigError(f"party name {name!r} cannot name a certificate: use lower-case letters, digits and '-', "
                          "starting with a letter (a DNS label, at most 63 characters), e.g. 'bank' or 'shop-eu'")


def make_authority(common_name: str = "ray_vfl test CA") -> Authority:
    """A self-signed CA that may sign party certificates (and nothing below them)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return Authority(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def issue(authority: Authority, party: str) -> tuple[bytes, bytes]:
    """``(certificate PEM, private key PEM)`` of ``party``, signed by ``authority``: usable as a TLS
    server (its gateway) and client (its calls to the others)."""
    _check_name(party)
    ca_cert = x509.load_pem_x509_certificate(authority.cert_pem)
    ca_key = serialization.load_pem_private_key(authority.key_pem, password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, party)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(party)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def certificate_name(cert_pem: bytes) -> str:
    """The party a certificate names (its subject's common name)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names:
        raise ConfigError("the certificate names no party (its subject has no common name)")
    return str(names[0].value)


def _write(path: str, data: bytes, private: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def write_test_certificates(directory: str, parties: Sequence[str]) -> dict[str, dict[str, str]]:
    """A test CA and a certificate per party under ``directory``: ``ca.pem`` (the CA's certificate, which
    every party trusts), ``<party>.pem`` and ``<party>.key`` (owner-only). The CA's key is not kept: no
    certificate can be added later (make a new set). Returns each party's ``{"cert", "key", "ca"}`` paths."""
    parties = list(parties)
    for party in parties:
        _check_name(party)
    if len(set(parties)) != len(parties) or not parties:
        raise ConfigError(f"name each party once, at least one: got {parties}")
    os.makedirs(directory, exist_ok=True)
    authority = make_authority()
    ca_path = os.path.join(directory, "ca.pem")
    _write(ca_path, authority.cert_pem)
    out = {}
    for party in parties:
        cert, key = issue(authority, party)
        paths = {"cert": os.path.join(directory, f"{party}.pem"), "key": os.path.join(directory, f"{party}.key"),
                 "ca": ca_path}
        _write(paths["cert"], cert)
        _write(paths["key"], key, private=True)
        out[party] = paths
    return out
