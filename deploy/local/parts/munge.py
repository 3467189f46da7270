"""munge: the box's private munged, whose socket every node reaches through the shared filesystem."""

from __future__ import annotations

import os
import shutil
import subprocess

from deploy.local.parts.layout import Layout, make_dir
from deploy.supervise import Service, flags, run

FILES = {"key": "munge.key", "pid": "munged.pid", "log": "munged.log", "seed": "munged.seed"}  # under STATE/munge


def ensure_munge(lay: Layout) -> None:
    """munged refuses group/world-writable directories and a key others can read; its dir is 0755 so that
    every user reaches the socket (munged makes the socket itself 0777)."""
    munge = make_dir(lay.munge, 0o755, owner="munge")
    key = munge / FILES["key"]
    if not key.exists():
        run(["mungekey", "--create", f"--keyfile={key}"], "munge: creating the key")
    shutil.chown(key, "munge", "munge")
    os.chmod(key, 0o400)


def munge_ready(lay: Layout) -> str | None:
    sock = f"--socket={lay.munge_socket}"
    cred = subprocess.run(["munge", "-n", sock], text=True, capture_output=True)
    if cred.returncode != 0:
        return cred.stderr.strip()
    check = subprocess.run(["unmunge", sock], input=cred.stdout, text=True, capture_output=True)
    return None if check.returncode == 0 else check.stderr.strip()


def service() -> Service:
    return Service(
        "munged", "munged", ensure_munge,
        lambda lay: ["/usr/sbin/munged", "--foreground", *flags(socket=lay.munge_socket, **{
            f"{option}_file": lay.munge / name for option, name in FILES.items()})],
        munge_ready, 15, user="munge", extra_logs=lambda lay: [lay.munge / FILES["log"]])
