"""TLS for both boxes, made with openssl: a private CA, a server certificate signed by it, and a signing key pair.

What box.py (slapd's certificate) and kubebox.py (the API server's, and the ServiceAccount token key) share; a
failing openssl raises supervise.BoxError naming the step. Both boxes import it as `deploy.selfsigned` (they run as
modules of the `deploy` package, with `python -m` from the repository root).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from deploy.supervise import run


def ensure_ca_and_server_cert(tls: Path, server: str, *, ca_cn: str, server_cn: str, alt_names: list[str],
                              what: str, organization: str = "dsportal", usage: str = "serverAuth") -> None:
    """tls/ca.pem + ca.key (a self-signed CA, CN `ca_cn`) and tls/SERVER.pem + SERVER.key signed by it.

    Each is made only when missing; a new CA remakes the server certificate, and so do other `alt_names` than
    those it was made for (recorded in tls/SERVER.names; a certificate without that record is kept). `alt_names`
    are openssl subjectAltName entries ("IP:127.0.0.1", "DNS:localhost"); `what` names the server in messages. Keys end
    up 0600 and certificates 0644. A client certificate is the same with `usage` "clientAuth", no alt names and
    its groups as `organization` (how Kubernetes reads a certificate's user and groups)."""
    ca_pem, ca_key = tls / "ca.pem", tls / "ca.key"
    server_pem, server_key = tls / f"{server}.pem", tls / f"{server}.key"
    made_for, names = tls / f"{server}.names", ",".join(alt_names)
    if made_for.exists() and made_for.read_text() != names:
        server_pem.unlink(missing_ok=True)  # made for other addresses
    if not ca_pem.exists():
        run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
             "-keyout", str(ca_key), "-out", str(ca_pem), "-subj", f"/O=dsportal/CN={ca_cn}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign"], "TLS: creating the CA")
        server_pem.unlink(missing_ok=True)  # a new CA invalidates the old server certificate
    if not server_pem.exists():
        csr, ext = tls / f"{server}.csr", tls / f"{server}.ext"
        ext.write_text((f"subjectAltName={','.join(alt_names)}\n" if alt_names else "")
                       + f"basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                       f"extendedKeyUsage={usage}\n")
        run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(server_key),
             "-out", str(csr), "-subj", f"/O={organization}/CN={server_cn}"], f"TLS: creating the {what} key")
        run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_pem), "-CAkey", str(ca_key),
             "-set_serial", f"0x{secrets.token_hex(16)}", "-days", "825", "-extfile", str(ext),
             "-out", str(server_pem)], f"TLS: signing the {what} certificate")
        csr.unlink()
        ext.unlink()
    if alt_names:
        made_for.write_text(names)
    for key in (ca_key, server_key):
        os.chmod(key, 0o600)
    for cert in (ca_pem, server_pem):
        os.chmod(cert, 0o644)


def ensure_signing_key(tls: Path, name: str, what: str) -> None:
    """tls/NAME.key (RSA, 0600) and its public half tls/NAME.pub (0644), each made once."""
    key, pub = tls / f"{name}.key", tls / f"{name}.pub"
    if not key.exists():
        run(["openssl", "genrsa", "-out", str(key), "2048"], f"TLS: creating the {what} key")
        pub.unlink(missing_ok=True)  # the public half of another key
    if not pub.exists():
        run(["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)], f"TLS: extracting the {what} public key")
    os.chmod(key, 0o600)
    os.chmod(pub, 0o644)
