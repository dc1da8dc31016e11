"""The tests' throwaway PKI: a CA and the certificates it signs, made with openssl.

Every certificate has the extensions RFC 5280 asks for, so strict verification
(`ssl.VERIFY_X509_STRICT`: Python 3.13's default context, and verld's own contexts on
every Python) accepts them. The CA: `basicConstraints=critical,CA:TRUE`,
`keyUsage=critical,keyCertSign,cRLSign`, subject and authority key ids. A leaf:
`keyUsage=critical,digitalSignature`, `extendedKeyUsage` serverAuth or clientAuth,
`subjectAltName` (a server: DNS:localhost,IP:127.0.0.1), key ids. Keys are P-256 (fast
to make; an EC key's keyUsage has no keyEncipherment, RFC 8813). `Pki(..., strict=False)`
makes a CA as old recipes did (no keyUsage), for the tests of what strict verification
refuses. docs/network.md and docs/fleet.md give the same recipes to users
(tests/test_tls_recipes.py runs those).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from support import need

__all__ = ["Pki", "self_signed"]

EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
CA_EXTENSIONS = (
    "basicConstraints=critical,CA:TRUE",
    "keyUsage=critical,keyCertSign,cRLSign",
    "subjectKeyIdentifier=hash",
    "authorityKeyIdentifier=keyid:always",
)
_LEAF = (
    "basicConstraints=critical,CA:FALSE",
    "keyUsage=critical,digitalSignature",
    "subjectKeyIdentifier=hash",
    "authorityKeyIdentifier=keyid,issuer",
)
SERVER_NAMES = "subjectAltName=DNS:localhost,IP:127.0.0.1"


def openssl(*args: str) -> None:
    """Run openssl (a skip when it is missing; a failure under CI=true)."""
    exe = need("openssl", "openssl")
    done = subprocess.run([exe, *args], check=False, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"openssl {' '.join(args)}: {done.stderr}"


class Pki:
    """A CA in `dir` (`ca`, `ca_key`: ca.pem, ca.key) and the leaves it signs there."""

    def __init__(self, dir: Path, cn: str = "verld test CA", *, strict: bool = True) -> None:
        self.dir = dir
        dir.mkdir(parents=True, exist_ok=True)
        self.ca, self.ca_key = dir / "ca.pem", dir / "ca.key"
        extensions = [a for ext in CA_EXTENSIONS for a in ("-addext", ext)] if strict else []
        openssl(
            "req",
            "-x509",
            *EC,
            "-days",
            "2",
            "-subj",
            f"/CN={cn}",
            *extensions,
            "-keyout",
            str(self.ca_key),
            "-out",
            str(self.ca),
        )

    def server(self, name: str = "server", cn: str = "localhost") -> tuple[Path, Path]:
        """A server certificate for localhost and 127.0.0.1: (cert, key)."""
        return self.leaf(name, cn, "extendedKeyUsage=serverAuth", SERVER_NAMES)

    def client(self, name: str = "client", cn: str = "bench-client") -> tuple[Path, Path]:
        """A client certificate, subject CN=`cn`: (cert, key)."""
        return self.leaf(name, cn, "extendedKeyUsage=clientAuth")

    def leaf(self, name: str, cn: str, *extensions: str) -> tuple[Path, Path]:
        """A certificate this CA signs, `name`.pem and `name`.key, with `extensions`."""
        key, csr, cert, ext = (self.dir / f"{name}.{s}" for s in ("key", "csr", "pem", "ext"))
        ext.write_text("\n".join((*_LEAF, *extensions)) + "\n")
        openssl("req", *EC, "-subj", f"/CN={cn}", "-keyout", str(key), "-out", str(csr))
        ca = ("-CA", str(self.ca), "-CAkey", str(self.ca_key), "-CAcreateserial")
        openssl(
            "x509",
            "-req",
            "-in",
            str(csr),
            *ca,
            "-days",
            "2",
            "-extfile",
            str(ext),
            "-out",
            str(cert),
        )
        return cert, key


def self_signed(dir: Path, cn: str = "test") -> tuple[Path, Path]:
    """A self-signed certificate for a day, its own CA, fit for a server and a client
    (localhost, 127.0.0.1): (cert, key) in `dir` as c.pem, k.pem."""
    key, cert = dir / "k.pem", dir / "c.pem"
    extensions = (
        "basicConstraints=critical,CA:TRUE",
        "keyUsage=critical,digitalSignature,keyCertSign",
        "extendedKeyUsage=serverAuth,clientAuth",
        SERVER_NAMES,
        "subjectKeyIdentifier=hash",
    )
    openssl(
        "req",
        "-x509",
        *EC,
        "-days",
        "1",
        "-subj",
        f"/CN={cn}",
        *(a for ext in extensions for a in ("-addext", ext)),
        "-keyout",
        str(key),
        "-out",
        str(cert),
    )
    return cert, key
