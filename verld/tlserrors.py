"""TLS handshake failures in words a user can act on, for every program of verld.

verld verifies certificates strictly (`ssl.VERIFY_X509_STRICT`, RFC 5280's rules, as
Python 3.13's default context does) on every Python: a network port's client
certificates, and verld-mqtt's broker. A certificate refused for a missing extension
gets OpenSSL's verify message, which names the rule, not the fix; `handshake_error`
adds what the certificate lacks.
"""

from __future__ import annotations

import ssl

__all__ = ["STRICT_REASONS", "handshake_error"]

#: what strict verification (RFC 5280) found missing, by OpenSSL's verify message
STRICT_REASONS = {
    "CA cert does not include key usage extension": "CA certificate lacks keyUsage",
    "Basic Constraints of CA cert not marked critical": (
        "CA certificate's basicConstraints is not critical"
    ),
    "Missing Subject Key Identifier": "CA certificate lacks subjectKeyIdentifier",
    "Missing Authority Key Identifier": "certificate lacks authorityKeyIdentifier",
    "invalid CA certificate": "CA certificate is no CA (basicConstraints CA:TRUE, keyCertSign)",
    "unsuitable certificate purpose": (
        "certificate's extendedKeyUsage is for another use (clientAuth, serverAuth)"
    ),
}


def handshake_error(exc: BaseException, whose: str = "client") -> str:
    """A failed TLS handshake's text for a log line: the error's own (a certificate
    refused: OpenSSL's verify message in it), then, when strict verification refused
    it, what the certificates lack: "...; the client's CA certificate lacks keyUsage
    (strict verification, RFC 5280)". `whose`: the peer whose certificate it was."""
    text = str(exc) or type(exc).__name__
    message = getattr(exc, "verify_message", None)
    if not isinstance(exc, ssl.SSLCertVerificationError) or not message:
        return text
    if message not in text:
        text = f"{text}: {message}"
    lacks = STRICT_REASONS.get(message)
    return f"{text}; the {whose}'s {lacks} (strict verification, RFC 5280)" if lacks else text
