"""OpenSSL contexts and messages for graphpar's mutual TLS (the coordinator tunnel and the Dynamic Cluster
scheduler): one place that turns :class:`~graphpar.communication.tls_config.TlsSettings` into an ``ssl.SSLContext``
and a failed handshake into a sentence naming the certificate and the reason."""

from __future__ import annotations

import datetime
import logging
import os
import shutil
import ssl

from graphpar._logging import notice_once
from graphpar.communication import private_dir
from graphpar.communication.tls_config import Identity, TlsError, TlsSettings

HANDSHAKE_SECONDS = 15.0


def _pem(path: str) -> bytes:
    """A certificate or CRL file as PEM (DER files converted)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    with open(path, "rb") as fh:
        data = fh.read()
    if b"-----BEGIN" in data:
        return data
    for loader in (x509.load_der_x509_certificate, x509.load_der_x509_crl):
        try:
            return loader(data).public_bytes(serialization.Encoding.PEM)
        except ValueError:
            continue
    raise TlsError(f"TLS: {path!r} is neither PEM nor a DER certificate/CRL", path)


def _write_private(path: str, data: bytes) -> None:
    """``data`` in a new 0600 file (never through a link, never over an existing file)."""
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as fh:
        fh.write(data)


def ssl_context(settings: TlsSettings, server: bool) -> ssl.SSLContext:
    """A TLS 1.2+ context that presents ``settings``' server (or client) identity and requires the peer's
    certificate, verified against the CA and the CRL."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if not server:
        ctx.check_hostname = False  # identity is "signed by the job's CA", as in MindSpore; hosts move
    ctx.verify_mode = ssl.CERT_REQUIRED
    identity = settings.server if server else settings.client
    # ssl loads keys from files only: the key goes there encrypted with a one-time password, as a 0600 file in a
    # 0700 directory of this user (private_dir), removed before this returns
    from cryptography.hazmat.primitives import serialization

    secret = os.urandom(24).hex().encode()
    key_pem = serialization.load_pem_private_key(identity.key_pem, None).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(secret))
    folder = private_dir.job_dir("tls-keys-")
    try:
        cert, key, trust = (os.path.join(folder, name) for name in ("cert.pem", "key.pem", "trust.pem"))
        _write_private(cert, identity.cert_pem)
        _write_private(key, key_pem)
        ctx.load_cert_chain(cert, key, password=secret)
        _write_private(trust, _pem(settings.ca_cert) + (b"\n" + _pem(settings.crl) if settings.crl else b""))
        ctx.load_verify_locations(cafile=trust)
    except ssl.SSLError as exc:
        raise TlsError(f"TLS: the certificates of {settings.config_file} cannot be used: {exc}",
                       settings.config_file) from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if settings.crl:
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    if settings.cipher_list:
        try:
            ctx.set_ciphers(settings.cipher_list)
        except ssl.SSLError:
            raise TlsError(f"TLS: {settings.config_file}: cipher_list {settings.cipher_list!r} selects no cipher "
                           "OpenSSL knows", "cipher_list") from None
    return ctx


def warn_if_expiring(identity: Identity, days: int, what: str) -> None:
    """A warning when ``identity`` expires within ``days`` (MindSpore's cert_expire_warning_time_in_day)."""
    left = identity.not_after - datetime.datetime.now(datetime.timezone.utc)
    if left < datetime.timedelta(days=days):
        state = "EXPIRED on" if left.total_seconds() < 0 else f"expires in {left.days} day(s), on"
        notice_once(f"tls-expiry:{identity.path}", f"TLS: {what} {identity.path} ({identity.subject}) {state} "
                    f"{identity.not_after:%Y-%m-%d %H:%M} UTC (cert_expire_warning_time_in_day={days})",
                    logging.WARNING)


def handshake_reason(exc: BaseException) -> str:
    """OpenSSL's words for a failed handshake: the verify message, else the alert (``tlsv13 alert certificate
    revoked``), else the error text."""
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return str(exc.verify_message)
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason).lower().replace("_", " ")
    return str(exc) or type(exc).__name__


def refused_message(peer: str, where: str, mine: Identity, reason: str) -> str:
    """The worker's sentence when ``peer`` (the coordinator, the scheduler) at ``where`` refused its certificate."""
    expired = mine.not_after < datetime.datetime.now(datetime.timezone.utc)
    return (f"TLS: the {peer} at {where} refused this worker's certificate client_cert_path {mine.path} "
            f"({mine.subject}{', expired on ' + format(mine.not_after, '%Y-%m-%d') if expired else ''}): "
            f"{reason}. Use a certificate signed by the job's CA, not revoked and not expired")


def untrusted_server_message(peer: str, where: str, settings: TlsSettings, exc: ssl.SSLCertVerificationError) -> str:
    """The worker's sentence when the ``peer`` at ``where`` presented a certificate it does not trust."""
    crl = f" and crl_path {settings.crl}" if settings.crl else ""
    return (f"TLS: the {peer} at {where} presented a certificate this worker does not trust: {exc.verify_message} "
            f"(checked against ca_cert_path {settings.ca_cert}{crl})")
