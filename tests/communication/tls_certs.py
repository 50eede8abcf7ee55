"""Certificates for the TLS tests, generated at test time with ``cryptography``: a CA, a second CA, the server's
and workers' PKCS#12 files (valid, signed by the other CA, revoked, expired, expiring soon), a CRL, and MindSpore's
JSON config file for each worker variant."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

PASSWORD = "graphpar-test-pw"
NOW = datetime.datetime.now(datetime.timezone.utc)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(cn: str):
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn)).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(NOW - datetime.timedelta(days=1))
            .not_valid_after(NOW + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(ca, cn: str, before: datetime.datetime, after: datetime.datetime):
    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(before).not_valid_after(after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    return key, cert


def _p12(path: Path, name: str, pair) -> Path:
    key, cert = pair
    path.write_bytes(pkcs12.serialize_key_and_certificates(
        name.encode(), key, cert, None, serialization.BestAvailableEncryption(PASSWORD.encode())))
    return path


def make(root: Path) -> dict[str, Path]:
    """Write everything under ``root``; returns {variant: config JSON path} for variants server (process 0),
    valid, other_ca, revoked, expired, expiring."""
    root.mkdir(parents=True, exist_ok=True)
    ca, other = _ca("graphpar test CA"), _ca("some other CA")
    (root / "ca.crt").write_bytes(ca[1].public_bytes(serialization.Encoding.PEM))
    year = NOW + datetime.timedelta(days=365)
    day_ago = NOW - datetime.timedelta(days=1)
    server = _p12(root / "server.p12", "server", _leaf(ca, "coordinator", day_ago, year))
    leaves = {
        "valid": _leaf(ca, "worker-valid", day_ago, year),
        "other_ca": _leaf(other, "worker-other-ca", day_ago, year),
        "revoked": _leaf(ca, "worker-revoked", day_ago, year),
        "expired": _leaf(ca, "worker-expired", NOW - datetime.timedelta(days=30), NOW - datetime.timedelta(days=2)),
        "expiring": _leaf(ca, "worker-expiring", day_ago, NOW + datetime.timedelta(days=5)),
    }
    crl = (x509.CertificateRevocationListBuilder().issuer_name(ca[1].subject).last_update(day_ago)
           .next_update(year)
           .add_revoked_certificate(x509.RevokedCertificateBuilder()
                                    .serial_number(leaves["revoked"][1].serial_number)
                                    .revocation_date(day_ago).build())
           .sign(ca[0], hashes.SHA256()))
    (root / "ca.crl").write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    configs = {}
    for variant in ("server", *leaves):
        client = "server.p12" if variant == "server" else _p12(root / f"{variant}.p12", variant, leaves[variant]).name
        body = {"server_cert_path": server.name, "client_cert_path": client, "ca_cert_path": "ca.crt",
                "crl_path": "ca.crl", "cipher_list": "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384",
                "cert_expire_warning_time_in_day": 30}
        configs[variant] = root / f"config_{variant}.json"
        configs[variant].write_text(json.dumps(body))
    return configs
