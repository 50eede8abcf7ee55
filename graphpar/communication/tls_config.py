"""``set_ps_context``: MindSpore's switch and files for TLS on the control plane, read and checked here.

MindSpore configures TLS with ``set_ps_context(enable_ssl=True, config_file_path=JSON, client_password=...,
server_password=...)``; the JSON file names the certificates::

    {"server_cert_path": "server.p12", "client_cert_path": "client.p12", "ca_cert_path": "ca.crt",
     "crl_path": "", "cipher_list": "ECDHE-RSA-AES128-GCM-SHA256:...", "cert_expire_warning_time_in_day": 90}

``server_cert_path`` / ``client_cert_path`` are PKCS#12 files (certificate and private key, the key encrypted with
``server_password`` / ``client_password``); relative paths are relative to the JSON file's directory. The settings
are checked when they are set (files readable, passwords right), so a mistake surfaces at ``set_ps_context``, not
when the job forms. :mod:`graphpar.communication.tls_tunnel` uses them.
"""

from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass
from typing import Any

from graphpar._logging import notice_once
from graphpar.errors import ConfigError, GraphparError, UnknownSettingError

DEFAULT_WARNING_DAYS = 90  # MindSpore's cert_expire_warning_time_in_day default
_KEYS = ("server_cert_path", "client_cert_path", "ca_cert_path", "crl_path", "cipher_list",
         "cert_expire_warning_time_in_day")
_REQUIRED = ("server_cert_path", "client_cert_path", "ca_cert_path")


class TlsError(GraphparError, RuntimeError):
    """A TLS setting, certificate or handshake that fails. ``culprit`` names the file, key or peer at fault."""

    def __init__(self, message: str, culprit: str | None = None):
        self.culprit = culprit
        super().__init__(message)


@dataclass(frozen=True)
class Identity:
    """A certificate with its private key, as PEM, from a PKCS#12 file."""

    path: str
    subject: str
    not_after: datetime.datetime
    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True)
class TlsSettings:
    config_file: str
    server: Identity
    client: Identity
    ca_cert: str
    crl: str | None
    cipher_list: str | None
    warning_days: int


_state: dict[str, Any] = {"enable_ssl": False, "config_file_path": "", "client_password": "",
                          "server_password": "", "enable_ps": False}
_settings: list[TlsSettings] = []  # the loaded settings while enable_ssl is on (at most one)


def _password(value: Any, key: str) -> bytes | None:
    if value in (None, ""):
        return None
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise ConfigError("set_ps_context", key, "***", reason=f"{key} must be a str")
    return value.encode()


def load_identity(path: str, password: bytes | None, what: str) -> Identity:
    """The certificate and key of PKCS#12 file ``path`` (``what``: the config key naming it)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise TlsError(f"TLS: {what} {path!r} cannot be read: {exc.strerror or exc}", path) from None
    try:
        key, cert, _ = pkcs12.load_key_and_certificates(data, password)
    except ValueError as exc:
        raise TlsError(f"TLS: {what} {path!r} is not a PKCS#12 file or its password is wrong ({exc}); check the "
                       f"file and set_ps_context({'server' if what.startswith('server') else 'client'}_password=...)",
                       path) from None
    if key is None or cert is None:
        raise TlsError(f"TLS: {what} {path!r} must hold a certificate and its private key", path)
    return Identity(path, cert.subject.rfc4514_string(), cert.not_valid_after_utc,
                    cert.public_bytes(serialization.Encoding.PEM),
                    key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))


def _check_readable(path: str, what: str) -> str:
    if not os.path.isfile(path):
        raise TlsError(f"TLS: {what} {path!r} does not exist", path)
    return path


def load_settings(config_file: str, client_password: bytes | None, server_password: bytes | None) -> TlsSettings:
    """Read MindSpore's TLS JSON file and the files it names."""
    try:
        with open(config_file) as fh:
            body = json.load(fh)
    except OSError as exc:
        raise TlsError(f"TLS: config_file_path {config_file!r} cannot be read: {exc.strerror or exc}",
                       config_file) from None
    except ValueError as exc:
        raise TlsError(f"TLS: config_file_path {config_file!r} is not JSON: {exc}", config_file) from None
    if not isinstance(body, dict):
        raise TlsError(f"TLS: config_file_path {config_file!r} must hold a JSON object with {', '.join(_KEYS)}",
                       config_file)
    unknown = sorted(set(body) - set(_KEYS))
    if unknown:
        raise TlsError(f"TLS: {config_file}: unknown key(s) {unknown}; valid: {', '.join(_KEYS)}", config_file)
    missing = [k for k in _REQUIRED if not body.get(k)]
    if missing:
        raise TlsError(f"TLS: {config_file}: {', '.join(missing)} must be set", config_file)
    base = os.path.dirname(os.path.abspath(config_file))

    def path(key: str) -> str:
        return os.path.normpath(os.path.join(base, str(body[key])))

    days = body.get("cert_expire_warning_time_in_day", DEFAULT_WARNING_DAYS)
    if not isinstance(days, int) or isinstance(days, bool) or days < 0:
        raise TlsError(f"TLS: {config_file}: cert_expire_warning_time_in_day must be an int >= 0, got {days!r}",
                       config_file)
    cipher_list = body.get("cipher_list") or None
    if cipher_list is not None:
        import ssl

        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).set_ciphers(cipher_list)
        except (ssl.SSLError, TypeError):
            raise TlsError(f"TLS: {config_file}: cipher_list {cipher_list!r} selects no cipher OpenSSL knows (an "
                           "OpenSSL cipher string, e.g. 'ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES128-GCM-SHA256')",
                           "cipher_list") from None
    return TlsSettings(
        config_file=os.path.abspath(config_file),
        server=load_identity(path("server_cert_path"), server_password, "server_cert_path"),
        client=load_identity(path("client_cert_path"), client_password, "client_cert_path"),
        ca_cert=_check_readable(path("ca_cert_path"), "ca_cert_path"),
        crl=_check_readable(path("crl_path"), "crl_path") if body.get("crl_path") else None,
        cipher_list=cipher_list, warning_days=days)


def set_ps_context(**kwargs: Any) -> None:
    """MindSpore's ``set_ps_context``: ``enable_ssl``, ``config_file_path``, ``client_password``,
    ``server_password`` (TLS of the control plane, see docs/distributed.md); ``enable_ps=False``."""
    api = "set_ps_context"
    valid = set(_state)
    for key in kwargs:
        if key not in valid:
            raise UnknownSettingError(api, key, valid)
    if kwargs.get("enable_ps"):
        raise ConfigError(api, "enable_ps", kwargs["enable_ps"], valid=[False],
                          reason="enable_ps=True: graphpar has no parameter-server mode (Parameter Server training is not "
                          "supported)")
    for key in ("enable_ssl", "enable_ps"):
        if key in kwargs and not isinstance(kwargs[key], bool):
            raise ConfigError(api, key, kwargs[key], valid=[True, False])
    if "config_file_path" in kwargs and not isinstance(kwargs["config_file_path"], (str, os.PathLike)):
        raise ConfigError(api, "config_file_path", kwargs["config_file_path"], reason="must be a path")
    state = {**_state, **kwargs}
    state["config_file_path"] = os.fspath(state["config_file_path"])
    if state["enable_ssl"]:
        if not state["config_file_path"]:
            raise ConfigError(api, "enable_ssl", True, reason="enable_ssl=True needs config_file_path (a JSON file "
                              "naming server_cert_path, client_cert_path, ca_cert_path, ...)")
        loaded = load_settings(state["config_file_path"], _password(state["client_password"], "client_password"),
                               _password(state["server_password"], "server_password"))
        _settings[:] = [loaded]
    else:
        _settings.clear()
        unused = [k for k in ("config_file_path", "client_password", "server_password") if kwargs.get(k)]
        if unused:
            notice_once(f"ps-unused:{','.join(unused)}", f"set_ps_context({', '.join(unused)}): not used while "
                        "enable_ssl is False (graphpar reads them only for TLS on the control plane); pass "
                        "enable_ssl=True to use them")
    _state.update(state)


def get_ps_context(key: str) -> Any:
    if key not in _state:
        raise UnknownSettingError("get_ps_context", key, set(_state))
    return "***" if key.endswith("password") and _state[key] else _state[key]


def active() -> TlsSettings | None:
    """The TLS settings when ``enable_ssl`` is on, else None."""
    return _settings[0] if _settings else None
