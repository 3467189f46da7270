"""alice's JupyterLab server, spawned through the hub: the templates are in ~/notebooks, TensorBoard is served
at /user/alice/tensorboard/ with a launcher entry; `%tensorboard`, which listens on the node's loopback, is not
proxied."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest

from portal.config import load
from portal.templates import INSTALLED_LIST
from tests.conftest import REPO, as_user, page_error, scratch_dir, wait_for

pytestmark = pytest.mark.integration
TEMPLATES = sorted(path.name for path in (REPO / "notebooks").glob("*.ipynb"))
TENSORBOARD_START_S = 90  # TensorBoard imports TensorFlow on first start: slow on a shared 2-core machine


def server_environ(user: str) -> dict[str, str]:
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and proc.stat().st_uid == pwd.getpwnam(user).pw_uid and \
                    b"jupyterhub-singleuser" in (proc / "cmdline").read_bytes():
                pairs = (proc / "environ").read_bytes().split(b"\0")
                return dict(p.decode().split("=", 1) for p in pairs if b"=" in p)
        except OSError:
            continue
    raise AssertionError(f"no jupyterhub-singleuser process of {user}")


def test_a_new_server_has_the_templates_and_tensorboard(hub, admin, alice):
    account = pwd.getpwnam("alice")
    home = Path(account.pw_dir)
    notebooks = home / load().user_notebooks_dir  # the test box's own place in the home, not ~/notebooks
    edited = notebooks / TEMPLATES[0]
    scratch_dir("alice")  # the mark it is in, made as alice
    as_user("alice", "mkdir", "-p", "--", str(notebooks))
    if not (edited.parent / INSTALLED_LIST).exists():  # a first spawn: pretend alice made this file herself
        edited.write_text("alice's own notebook")
    for path in (edited.parent, edited):
        os.chown(path, account.pw_uid, account.pw_gid)
    before = edited.read_text()
    response = hub.spawn_form(alice, partition="gpu", gpus=0, cpus=2, memory_gb=4, runtime="01:00:00")
    assert response.status_code == 302, page_error(response)
    hub.wait_ready(admin, "alice")

    assert sorted(p.name for p in notebooks.glob("*.ipynb")) == TEMPLATES
    assert edited.read_text() == before  # never overwritten
    assert (notebooks / TEMPLATES[1]).stat().st_uid == pwd.getpwnam("alice").pw_uid
    assert "TENSORBOARD_PROXY_URL" not in server_environ("alice")  # %tensorboard's port: the node's loopback

    servers = alice.get(f"{hub.url}/user/alice/server-proxy/servers-info", timeout=30)
    assert servers.status_code == 200, servers.text[:500]
    entry = {s["name"]: s for s in servers.json()["server_processes"]}["tensorboard"]
    assert entry["launcher_entry"]["title"] == "TensorBoard" and entry["launcher_entry"]["enabled"]

    def tensorboard_page():
        page = alice.get(f"{hub.url}/user/alice/tensorboard/", timeout=TENSORBOARD_START_S)
        return page if page.status_code == 200 else None
    page = wait_for(tensorboard_page, TENSORBOARD_START_S, interval=3, what="TensorBoard behind the proxy")
    assert "<tf-tensorboard" in page.text or "TensorBoard" in page.text
    runs = alice.get(f"{hub.url}/user/alice/tensorboard/data/runs", timeout=30)
    assert runs.status_code == 200 and isinstance(json.loads(runs.text), list)
    hub.stop(admin, "alice")
