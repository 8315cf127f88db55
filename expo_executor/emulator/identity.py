"""Google's instance identity tokens, emulated: a local RSA key signs them, its certificate is
served in the format of ``https://www.googleapis.com/oauth2/v1/certs``.

A real VM asks its metadata server for
``instance/service-accounts/default/identity?audience=A&format=full`` and gets a JWT signed by
Google (RS256) whose ``google.compute_engine`` claims name the VM's project, zone and instance;
anyone verifies it against Google's published certificates. The fake Compute holds one
:class:`IdentityIssuer` for all its instances, hands it to each instance's fake metadata server,
and serves :meth:`IdentityIssuer.certs` at ``/oauth2/v1/certs``, so the coordinator verifies
emulated tokens with google-auth's own ``verify_token``, exactly as it verifies real ones.
"""

from __future__ import annotations

import datetime
import time

ISSUER = "https://accounts.google.com"
LIFETIME_S = 3600  # a real identity token is valid for one hour
CERTS_PATH = "/oauth2/v1/certs"


class IdentityIssuer:
    """Signs identity tokens with a key of its own (made at start, never written anywhere)."""

    def __init__(self, key_id: str = "fake-google-key-1") -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID
        from google.auth import crypt

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-google-identity")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=30))
                .sign(key, hashes.SHA256()))
        self.key_id = key_id
        self._cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        self._signer = crypt.RSASigner.from_string(pem, key_id)

    def certs(self) -> dict[str, str]:
        """What ``/oauth2/v1/certs`` answers: key id -> PEM certificate."""
        return {self.key_id: self._cert_pem}

    def token(self, audience: str, *, project: str, zone: str, name: str, instance_id: int,
              service_account: str, full: bool = True, now: float | None = None) -> str:
        """An identity token for one instance, as its metadata server mints it (``full``: with
        the ``google.compute_engine`` claims)."""
        from google.auth import jwt

        issued = int(now if now is not None else time.time())
        payload: dict = {"iss": ISSUER, "aud": audience, "azp": service_account,
                         "sub": str(abs(hash(service_account)) % 10 ** 21),
                         "email": service_account, "email_verified": True,
                         "iat": issued, "exp": issued + LIFETIME_S}
        if full:
            payload["google"] = {"compute_engine": {
                "project_id": project, "project_number": 123456789, "zone": zone,
                "instance_id": str(instance_id), "instance_name": name,
                "instance_creation_timestamp": issued}}
        return jwt.encode(self._signer, payload).decode()

    def transport(self, certs_url: str) -> CertsTransport:
        """A google-auth transport that answers ``certs_url`` with :meth:`certs` in process
        (no server), for a verifier outside the fake Compute (tests of the key channel)."""
        return CertsTransport(self, certs_url)


class _Response:
    def __init__(self, status: int, data: bytes) -> None:
        self.status, self.data, self.headers = status, data, {}


class CertsTransport:
    """google-auth's ``Request`` at the HTTP boundary: the certificates URL answers as Google's
    does, any other URL 404; ``fetches`` counts the requests."""

    def __init__(self, issuer: IdentityIssuer, certs_url: str) -> None:
        self.issuer = issuer
        self.certs_url = certs_url
        self.fetches = 0

    def __call__(self, url: str, method: str = "GET", **_: object) -> _Response:
        import json

        self.fetches += 1
        if method != "GET" or url != self.certs_url:
            return _Response(404, b"not found")
        return _Response(200, json.dumps(self.issuer.certs()).encode())
