"""NetworkPolicies as iptables rules for one node of the Kubernetes box (pure: the objects in, the text for
`iptables-restore --noflush` out; unit-tested). kubeparts/netpol.py watches the objects and programs the nodes.

The subset the portal's policies use, with Kubernetes' semantics: a policy selects pods of its namespace
(`podSelector`: matchLabels and matchExpressions); a pod selected by a policy of a type (Ingress, Egress; without
`policyTypes`: Ingress, and Egress when the policy has egress rules) is isolated in that direction, and only what
one of those policies' rules allows passes. A rule's peers: `podSelector` (the policy's namespace), a
`namespaceSelector` (every namespace carries its name as the label kubernetes.io/metadata.name, as in 1.21+), both
(pods of those namespaces), or an `ipBlock` with its `except`; its ports: a number or a name (of the selected pod's
container, for ingress), TCP/UDP/SCTP, `endPort`; no peers means any, no ports any port. Replies to allowed
connections pass (conntrack), and so does what the node itself sends (it leaves by OUTPUT, never FORWARD here).

On a node, in the filter table of its network namespace (where its pods' bridge and kube-proxy are), FORWARD
jumps first to CHAIN, which sends each isolated local pod's traffic to its own chain: DSP-E-* (egress, by its
source address) and DSP-I-* (ingress, by its destination, after kube-proxy's DNAT, so a Service's address counts
as its pods'). A pod's chain clears the mark bit ALLOWED, sets it for every allowed match (an ipBlock with
exceptions in a DSP-B-* chain of its own) and rejects the packet when no rule set it. A pod on another node is
checked on that node: egress where the source runs, ingress where the destination runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

CHAIN = "DSP-NETPOL"  # what FORWARD jumps to first
PREFIX = "DSP-"  # every chain of ours
ALLOWED = "0x20000/0x20000"  # a bit kube-proxy leaves alone (it uses 0x4000 and 0x8000)
NAMESPACE_NAME = "kubernetes.io/metadata.name"
ENDED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    ip: str
    node: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ports: Mapping[str, tuple[str, int]] = field(default_factory=dict)  # a container port's name -> (protocol, n)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class Program:
    """One node's rules: iptables-restore's input, the chains it defines, and what it said about the policies."""

    text: str
    chains: list[str]
    fenced: list[str]  # "namespace/pod in+out", one per isolated local pod
    notes: list[str]  # what of a policy is not enforced (a named port for egress): it then allows nothing


def pods_of(items: Iterable[Mapping[str, Any]]) -> list[Pod]:
    """The pods that have an address of their own (not ended, not on the node's network), from the API's JSON."""
    found = []
    for item in items:
        meta, spec, status = item.get("metadata") or {}, item.get("spec") or {}, item.get("status") or {}
        if not status.get("podIP") or spec.get("hostNetwork") or status.get("phase") in ENDED:
            continue
        ports = {port["name"]: (port.get("protocol") or "TCP", int(port["containerPort"]))
                 for container in spec.get("containers") or [] for port in container.get("ports") or []
                 if port.get("name")}
        found.append(Pod(meta.get("namespace", ""), meta.get("name", ""), status["podIP"], spec.get("nodeName", ""),
                         dict(meta.get("labels") or {}), ports))
    return found


def namespace_labels(items: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """Each namespace's labels, with its name as kubernetes.io/metadata.name (1.21+ sets it; 1.20 does not)."""
    return {item["metadata"]["name"]: {**(item["metadata"].get("labels") or {}),
                                       NAMESPACE_NAME: item["metadata"]["name"]} for item in items}


def matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A label selector: {} selects everything."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for term in selector.get("matchExpressions") or []:
        key, values = term["key"], term.get("values") or []
        holds = {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
                 "Exists": key in labels, "DoesNotExist": key not in labels}.get(term["operator"], False)
        if not holds:
            return False
    return True


def _types(policy: Mapping[str, Any]) -> list[str]:
    spec = policy.get("spec") or {}
    return spec.get("policyTypes") or ["Ingress", *(["Egress"] if spec.get("egress") is not None else [])]


def _selected(policy: Mapping[str, Any], pod: Pod) -> bool:
    return policy["metadata"]["namespace"] == pod.namespace and \
        matches((policy.get("spec") or {}).get("podSelector") or {}, pod.labels)


def _peers(peer: Mapping[str, Any], namespace: str, pods: list[Pod], namespaces: dict[str, dict[str, str]]
           ) -> list[tuple[str, tuple[str, ...]]]:
    """(CIDR, its exceptions) for each address a peer stands for."""
    if "ipBlock" in peer:
        return [(peer["ipBlock"]["cidr"], tuple(peer["ipBlock"].get("except") or ()))]
    pod_selector, ns_selector = peer.get("podSelector"), peer.get("namespaceSelector")
    return [(f"{pod.ip}/32", ()) for pod in pods
            if (matches(ns_selector, namespaces.get(pod.namespace, {})) if ns_selector is not None
                else pod.namespace == namespace)
            and (pod_selector is None or matches(pod_selector, pod.labels))]


def _ports(ports: list[Mapping[str, Any]] | None, pod: Pod, direction: str, notes: list[str], where: str
           ) -> list[str]:
    """iptables matches for a rule's ports ("" for any port)."""
    if not ports:
        return [""]
    found = []
    for port in ports:
        protocol, number = (port.get("protocol") or "TCP").lower(), port.get("port")
        if isinstance(number, str) and not number.isdigit():
            if direction == "egress" or number not in pod.ports:
                notes.append(f"{where}: port {number!r} not resolved for {pod.key} ({direction}): allows nothing")
                continue
            protocol, number = pod.ports[number][0].lower(), pod.ports[number][1]
        if number is None:
            found.append(f"-p {protocol}")
            continue
        end = f":{port['endPort']}" if port.get("endPort") else ""
        found.append(f"-p {protocol} -m {protocol} --dport {number}{end}")
    return found


def _name(kind: str, *parts: str) -> str:
    return f"{PREFIX}{kind}-" + hashlib.sha256("/".join(parts).encode()).hexdigest()[:16].upper()


def _pod_chain(pod: Pod, direction: str, policies: list[Mapping[str, Any]], pods: list[Pod],
               namespaces: dict[str, dict[str, str]], notes: list[str]) -> tuple[str, list[str], list[str]]:
    """(the pod's chain, its rules and those of its DSP-B-* chains, every chain's name)."""
    kind, side = ("I", "-s") if direction == "ingress" else ("E", "-d")
    chain = _name(kind, pod.key)
    rules, chains = [f"-A {chain} -j MARK --set-xmark 0x0/{ALLOWED.split('/')[1]}"], [chain]
    for policy in policies:
        where = f"NetworkPolicy {policy['metadata']['namespace']}/{policy['metadata']['name']}"
        for number, rule in enumerate((policy.get("spec") or {}).get(direction) or []):
            peers = rule.get("from" if direction == "ingress" else "to")
            addresses = [("", ())] if not peers else [address for peer in peers for address in
                                                      _peers(peer, policy["metadata"]["namespace"], pods, namespaces)]
            for port in _ports(rule.get("ports"), pod, direction, notes, where):
                for index, (cidr, excepted) in enumerate(addresses):
                    head = " ".join(part for part in (f"-A {chain}", f"{side} {cidr}" if cidr else "", port) if part)
                    if not excepted:
                        rules.append(f"{head} -j MARK --set-xmark {ALLOWED}")
                        continue
                    block = _name("B", chain, where, str(number), port, str(index))
                    chains.append(block)
                    rules.append(f"{head} -j {block}")
                    rules += [f"-A {block} {side} {cidr} -j RETURN" for cidr in excepted]
                    rules.append(f"-A {block} -j MARK --set-xmark {ALLOWED}")
    rules.append(f'-A {chain} -m mark ! --mark {ALLOWED} -m comment --comment "{pod.key} {direction}" -j REJECT')
    return chain, rules, chains


def node_program(node: str, policies: list[Mapping[str, Any]], pods: list[Pod],
                 namespaces: dict[str, dict[str, str]]) -> Program:
    """What `node` enforces: a chain per direction of each isolated pod of its own."""
    jumps = [f"-A {CHAIN} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN"]
    rules: list[str] = []
    chains, fenced, notes = [CHAIN], [], []
    for pod in sorted((pod for pod in pods if pod.node == node), key=lambda pod: pod.key):
        sides = []
        for direction, flag, match in (("egress", "Egress", "-s"), ("ingress", "Ingress", "-d")):
            chosen = [policy for policy in policies if flag in _types(policy) and _selected(policy, pod)]
            if not chosen:
                continue
            chain, lines, made = _pod_chain(pod, direction, chosen, pods, namespaces, notes)
            jumps.append(f"-A {CHAIN} {match} {pod.ip}/32 -j {chain}")
            rules += lines
            chains += made
            sides.append("in" if direction == "ingress" else "out")
        if sides:
            fenced.append(f"{pod.key} {'+'.join(sorted(sides))}")
    text = "\n".join(["*filter", *(f":{chain} - [0:0]" for chain in chains), *jumps, *rules, "COMMIT", ""])
    return Program(text, chains, fenced, sorted(set(notes)))


def removal(present: Iterable[str], keep: Iterable[str]) -> str:
    """iptables-restore's input that deletes our chains in `present` not in `keep` (after `keep`'s were
    rewritten, nothing jumps to them any more), or "" when there are none."""
    gone = sorted(set(present) - set(keep))
    if not gone:
        return ""
    return "\n".join(["*filter", *(f":{chain} - [0:0]" for chain in gone), *(f"-X {chain}" for chain in gone),
                      "COMMIT", ""])


def our_chains(saved: str) -> list[str]:
    """Our chains in `iptables-save -t filter`'s output."""
    return [line[1:].split()[0] for line in saved.splitlines() if line.startswith(f":{PREFIX}")]
