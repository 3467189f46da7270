"""A private CA and one server certificate signed by it, made with openssl: what box.py and kubebox.py share.

Stdlib only. Each script passes its own `run(cmd, what)`, so a failing openssl is reported in that script's words
and with its error class. Both scripts run as files, so they put this directory on sys.path and import it.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

Run = Callable[[list[str], str], object]  # run(cmd, what): raises the script's own error when cmd fails


def ensure_ca_and_server_cert(tls: Path, server: str, *, ca_cn: str, server_cn: str, alt_names: list[str],
                              what: str, run: Run) -> None:
    """tls/ca.pem + ca.key (a self-signed CA, CN `ca_cn`) and tls/SERVER.pem + SERVER.key signed by it.

    Each is made only when missing; a new CA remakes the server certificate. `alt_names` are openssl
    subjectAltName entries ("IP:127.0.0.1", "DNS:localhost"); `what` names the server in messages. Keys end
    up 0600 and certificates 0644."""
    ca_pem, ca_key = tls / "ca.pem", tls / "ca.key"
    server_pem, server_key = tls / f"{server}.pem", tls / f"{server}.key"
    if not ca_pem.exists():
        run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
             "-keyout", str(ca_key), "-out", str(ca_pem), "-subj", f"/O=dsportal/CN={ca_cn}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign"], "TLS: creating the CA")
        server_pem.unlink(missing_ok=True)  # a new CA invalidates the old server certificate
    if not server_pem.exists():
        csr, ext = tls / f"{server}.csr", tls / f"{server}.ext"
        ext.write_text(f"subjectAltName={','.join(alt_names)}\nbasicConstraints=CA:FALSE\n"
                       "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
        run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(server_key),
             "-out", str(csr), "-subj", f"/O=dsportal/CN={server_cn}"], f"TLS: creating the {what} key")
        run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_pem), "-CAkey", str(ca_key),
             "-set_serial", f"0x{secrets.token_hex(16)}", "-days", "825", "-extfile", str(ext),
             "-out", str(server_pem)], f"TLS: signing the {what} certificate")
        csr.unlink()
        ext.unlink()
    for key in (ca_key, server_key):
        os.chmod(key, 0o600)
    for cert in (ca_pem, server_pem):
        os.chmod(cert, 0o644)
