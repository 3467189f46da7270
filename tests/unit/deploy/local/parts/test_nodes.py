"""The cluster in a box's network, planned from the settings, and the files it edits (no namespaces made here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.local.parts.nodes import hosts_with, hosts_without, is_mount_point, network_of
from portal.config import ConfigError, PortalConfig

MARK = "# dsportal box /var/lib/dsportal"


def test_the_network_from_the_settings():
    net = network_of(PortalConfig())
    assert (net.bridge, net.gateway, net.prefix_length) == ("br-node", "198.18.0.1", 27)
    assert [(n.name, n.address, n.host_link) for n in net.nodes] == [
        ("node1", "198.18.0.2", "ve-node1"), ("node2", "198.18.0.3", "ve-node2")]
    tests = network_of(PortalConfig(box_nodes=1, box_node_prefix="tnode", box_subnet="198.18.0.32/27"))
    assert (tests.bridge, tests.gateway, [n.address for n in tests.nodes]) == ("br-tnode", "198.18.0.33",
                                                                              ["198.18.0.34"])
    assert max(len(n.host_link) for n in network_of(PortalConfig(box_nodes=29, box_node_prefix="abcdefgh")).nodes) \
        <= 15  # Linux interface names


@pytest.mark.parametrize(("settings", "words"), [
    ({"box_subnet": "10.0.0.0/24"}, "box_subnet is 10.0.0.0/24; allowed: a network inside 198.18.0.0/24"),
    ({"box_subnet": "192.168.1.0/27"}, "allowed: a network inside 198.18.0.0/24"),
    ({"box_subnet": "198.18.1.0/27"}, "allowed: a network inside 198.18.0.0/24"),
    ({"box_subnet": "nowhere"}, "box_subnet is 'nowhere'; allowed: a network such as 198.18.0.0/27"),
    ({"box_subnet": "198.18.0.0/30"}, "box_nodes is 2; allowed: 1-1 (box_subnet 198.18.0.0/30)"),
    ({"box_nodes": 0}, "box_nodes is 0; allowed: 1-29"),
    ({"box_node_prefix": "Node"}, "box_node_prefix is 'Node'; allowed: a lower-case letter"),
    ({"box_node_prefix": "averylongname"}, "box_node_prefix is 'averylongname'"),
    ({"slurmdbd_port": 0}, "slurmdbd_port is 0; allowed: 1-65535"),
])
def test_box_settings_are_checked(settings, words):
    with pytest.raises(ConfigError) as err:
        PortalConfig(**settings)
    assert words in str(err.value)


def test_the_hub_api_listens_where_the_nodes_reach_it():
    assert PortalConfig().hub_api_address == "198.18.0.1"
    assert PortalConfig(box_subnet="198.18.0.32/27").hub_api_address == "198.18.0.33"
    assert PortalConfig(scheduler="kubernetes").hub_api_address == "127.0.0.1"
    assert PortalConfig(hub_api_ip="0.0.0.0").hub_api_address == "0.0.0.0"


def test_hosts_entries_are_added_replaced_and_removed_leaving_other_lines_alone():
    before = "127.0.0.1 localhost\n198.18.0.9 mine  # by hand\n"
    added = hosts_with(before, [("198.18.0.2", "node1"), ("198.18.0.3", "node2")], MARK)
    assert added == before + f"198.18.0.2\tnode1\t{MARK}\n198.18.0.3\tnode2\t{MARK}\n"
    again = hosts_with(added, [("198.18.0.2", "node1")], MARK)  # a box of one node now: node2's entry goes
    assert again == before + f"198.18.0.2\tnode1\t{MARK}\n"
    other_box = hosts_with(again, [("198.18.0.34", "tnode1")], "# dsportal box /var/tmp/dsportal-test")
    assert hosts_without(other_box, MARK) == before + "198.18.0.34\ttnode1\t# dsportal box /var/tmp/dsportal-test\n"
    assert hosts_with("127.0.0.1 localhost", [], MARK) == "127.0.0.1 localhost\n"


def test_a_bind_mount_of_a_directory_onto_itself_is_a_mount_point():
    mountinfo = ("27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
                 "42 27 254:0 /run/netns /run/netns rw,relatime shared:1 - ext4 /dev/vda rw\n")
    assert is_mount_point(Path("/run/netns"), mountinfo)
    assert not is_mount_point(Path("/run/netns"), mountinfo.splitlines()[0] + "\n")
    assert not is_mount_point(Path("/run"), mountinfo)


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """/run/netns and the claims' directory of a machine of the test's own: namespaces as plain files."""
    from deploy import netns
    monkeypatch.setattr(netns, "NETNS_DIR", tmp_path / "netns")
    monkeypatch.setattr(netns, "OWNERS_DIR", tmp_path / "owners")
    (tmp_path / "netns").mkdir()
    return netns


def record(netns, path: Path, *names: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    netns._record(path, netns.Network("br-x", "198.18.0.1", 27,
                                      tuple(netns.Node(n, "198.18.0.2", f"ve-{n}") for n in names)))
    return path


def test_a_namespace_is_the_box_that_claimed_it_and_never_another_state_dirs(machine, tmp_path):
    """Node names are machine-wide, settings are not: a second state dir with the same node names (the tests'
    directory-only box) finds nothing of its own to stop, and cannot take a node another box holds."""
    users = tmp_path / "users" / "run" / "network.json"
    other = tmp_path / "other" / "run" / "network.json"
    machine.claim(users, "tnode1")
    record(machine, users, "tnode1")
    (machine.NETNS_DIR / "tnode1").touch()
    assert machine.owns(users, "tnode1")
    assert not machine.owns(other, "tnode1")  # no record of its own: nothing of it to stop
    record(machine, other, "tnode1")
    assert not machine.owns(other, "tnode1")  # a record naming it is not a claim
    with pytest.raises(machine.BoxError, match=r"tnode1 is another box's \(its record: .*users.*box_node_prefix"):
        machine.claim(other, "tnode1")
    assert machine.owner_of("tnode1") == str(users)
    assert not machine.release(other, "tnode1") and machine.owner_of("tnode1") == str(users)
    assert machine.release(users, "tnode1") and machine.owner_of("tnode1") is None
    assert not machine.OWNERS_DIR.exists()  # the last claim gone, its directory too


def test_a_claim_passes_on_once_its_box_no_longer_holds_the_node(machine, tmp_path):
    first = record(machine, tmp_path / "first" / "network.json", "tnode1")
    second = tmp_path / "second" / "network.json"
    machine.claim(first, "tnode1")
    (machine.NETNS_DIR / "tnode1").touch()
    first.unlink()  # its box went down (or its state dir was removed)
    machine.claim(second, "tnode1")
    record(machine, second, "tnode1")
    assert machine.owns(second, "tnode1") and not machine.owns(first, "tnode1")


def test_a_namespace_made_before_claims_existed_is_its_records(machine, tmp_path):
    users = record(machine, tmp_path / "users" / "network.json", "node1")
    (machine.NETNS_DIR / "node1").touch()
    assert machine.owner_of("node1") is None and machine.owns(users, "node1")


def test_teardown_removes_only_the_nodes_this_box_holds(machine, tmp_path, monkeypatch):
    mine = record(machine, tmp_path / "mine" / "network.json", "tnode1", "tnode2")
    theirs = record(machine, tmp_path / "theirs" / "network.json", "tnode2")
    machine.claim(mine, "tnode1")
    machine.claim(theirs, "tnode2")
    monkeypatch.setattr(machine, "remove_link", lambda name: False)
    monkeypatch.setattr(machine, "_remove_hosts", lambda marker: False)
    monkeypatch.setattr(machine, "_remove_netns_mount", lambda: False)
    removed = []
    machine.teardown(mine, "# mark", lambda node: [(f"namespace {node.name}", lambda: removed.append(node.name)
                                                     or True)])
    assert removed == ["tnode1"]
    assert machine.owner_of("tnode1") is None and machine.owner_of("tnode2") == str(theirs)
