"""Hosts of a test network on one machine (Python standard library and Debian's iproute2).

    from netbench import NetworkBench, NamespacesRefused

    with NetworkBench(["ctl", "node1", "node2"]) as net:
        net.run("node1", ["hostname", "-I"])           # a command on a host
        net.shape("node2", "100mbit")                   # its link at 100 Mbit/s, both ways
        net.link("node2", up=False)                     # its switch port down, and up again
        net.counters("node1")                           # {"rx_bytes": ..., "tx_bytes": ...}
        net.throughput("node1", "node2")                # bytes/s of one TCP stream between them

Each host is a network namespace with one link, `eth0`, a veth whose other end is a port of a
bridge that lives in a namespace of its own (the switch): the host's address is 198.18.0.<10+i>/24,
in the range RFC 2544 sets aside for network test benches, and nothing else. No address of the
bench is on the machine's own interfaces, no route leads out of it, and the bridge forwards only
between its ports, so no packet leaves the bench. A host's hostname is its own only for processes
started with `hostname_prefix()` (a UTS namespace each); everything else about the machine (files,
users, processes) is shared.

Rates: `tc qdisc ... tbf` on both ends of a host's link, so traffic in each direction is shaped
(netem is not available on every kernel). Faults: `link(host, up=False)` sets the host's bridge
port down, as a switch that drops the link; `kill_all(host)` kills every process in the host's
namespace, as a node that dies.

Names: `kgpt<6 hex>-<host>`, so benches of two tests at once never share one. Everything is
removed by stop() (also on exceptions, through the with block), and, where the owner is SIGKILLed,
by the guardian of slurm_cluster.py (multinode_cluster.py tells it every namespace; `guardian=`, a
callable taking "netns NAME" lines, does the same for a bench of its own). A machine that refuses namespaces raises NamespacesRefused,
which tests turn into a skip.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from typing import Callable, Dict, List, Mapping, Optional, Sequence

SUBNET = "198.18.0"        # RFC 2544's benchmarking range, 198.18.0.0/15: hosts at .10 and up
BRIDGE = "br0"


class NamespacesRefused(RuntimeError):
    """This machine (or this user) cannot make network namespaces: tests skip."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        r = subprocess.run(["ip", *args], capture_output=True, text=True)
    except FileNotFoundError as e:
        raise RuntimeError("`ip` not found: install Debian's iproute2") from e
    if check and r.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {r.stderr.strip()}")
    return r


def namespace_pids(namespace: str) -> List[int]:
    r = _ip("netns", "pids", namespace, check=False)
    return [int(p) for p in r.stdout.split()] if r.returncode == 0 else []


def kill_namespace(namespace: str) -> None:
    """SIGKILLs every process in the namespace (a few rounds, for forks), then removes it."""
    for _ in range(10):
        pids = namespace_pids(namespace)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.1)
    _ip("netns", "del", namespace, check=False)


class NetworkBench:
    def __init__(self, hosts: Sequence[str], guardian: Optional[Callable[[str], None]] = None):
        if len(set(hosts)) != len(hosts) or not hosts:
            raise ValueError(f"host names must be distinct: {hosts}")
        self.hosts = list(hosts)
        self.tag = "kgpt" + uuid.uuid4().hex[:6]
        self.switch = f"{self.tag}-switch"
        self.namespaces = {h: f"{self.tag}-{h}" for h in self.hosts}
        self.addresses = {h: f"{SUBNET}.{10 + i}" for i, h in enumerate(self.hosts)}
        self.ports = {h: f"port{i}" for i, h in enumerate(self.hosts)}
        self._guardian = guardian
        self._made: List[str] = []

    def __enter__(self) -> "NetworkBench":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        try:
            self._add_namespace(self.switch)
        except RuntimeError as e:
            raise NamespacesRefused(f"network namespaces are not available here ({e})") from e
        try:
            _ip("-n", self.switch, "link", "add", BRIDGE, "type", "bridge")
            _ip("-n", self.switch, "link", "set", BRIDGE, "up")
            for host in self.hosts:
                ns, port = self.namespaces[host], self.ports[host]
                self._add_namespace(ns)
                _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", self.switch)
                _ip("-n", self.switch, "link", "set", port, "master", BRIDGE)
                _ip("-n", self.switch, "link", "set", port, "up")
                _ip("-n", ns, "addr", "add", f"{self.addresses[host]}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "link", "set", "eth0", "up")
        except BaseException:
            self.stop()
            raise

    def _add_namespace(self, name: str) -> None:
        _ip("netns", "add", name)
        self._made.append(name)
        if self._guardian is not None:
            self._guardian(f"netns {name}")

    def stop(self) -> None:
        """Kills every process left in the hosts' namespaces and removes them (and the veths and
        the bridge with them)."""
        for name in reversed(self._made):
            kill_namespace(name)
        self._made = []

    # ------------------------------------------------------------------ hosts

    def prefix(self, host: str) -> List[str]:
        """argv prefix that runs a command inside the host's network namespace. (nsenter, not `ip
        netns exec`, which also mounts a sysfs of its own over /sys and so hides /sys/fs/cgroup,
        where slurmd looks.)"""
        return ["nsenter", f"--net=/run/netns/{self.namespaces[host]}"]

    def hostname_prefix(self, host: str, private_dirs: Mapping[str, str] = None) -> List[str]:
        """argv prefix that runs a command inside the host's network namespace with the host's
        name as its hostname (a UTS namespace of its own, inherited by its children); with
        `private_dirs` ({folder: the host's own folder}), also in a mount namespace where each
        folder is the host's own, as a node's local disk is."""
        setup = f"hostname {host}"
        flags = ["--uts"]
        if private_dirs:
            flags.append("--mount")
            for shared, own in private_dirs.items():
                setup += f" && mount --bind '{own}' '{shared}'"
        return self.prefix(host) + ["unshare", *flags, "sh", "-c", setup + ' && exec "$@"', "sh"]

    def run(self, host: str, argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.prefix(host) + list(argv), **kwargs)

    def pids(self, host: str) -> List[int]:
        return namespace_pids(self.namespaces[host])

    def kill_all(self, host: str) -> List[int]:
        """SIGKILLs every process in the host's namespace, as a node that dies; returns their pids."""
        killed = []
        for _ in range(10):
            pids = self.pids(host)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        return killed

    # ------------------------------------------------------------------ links

    def link(self, host: str, up: bool) -> None:
        """The host's switch port up or down (the host's own end stays up, as with a cable pulled at
        the switch)."""
        _ip("-n", self.switch, "link", "set", self.ports[host], "up" if up else "down")

    def shape(self, host: str, rate: Optional[str]) -> None:
        """Shapes the host's link to `rate` (tc's units: "100mbit", "1gbit") in both directions with
        a token bucket, or removes the shaping (rate None)."""
        for ns, dev in ((self.namespaces[host], "eth0"), (self.switch, self.ports[host])):
            subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"],
                           capture_output=True)
            if rate is not None:
                # A burst of 1 ms at the rate (at least 64 KiB, so that TCP's segments pass), and a
                # queue of 50 ms before packets are dropped.
                bits = _rate_bits(rate)
                burst = max(64 * 1024, bits // 8 // 1000)
                r = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                                    "rate", rate, "burst", str(burst), "latency", "50ms"],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    raise RuntimeError(f"tc tbf on {ns}/{dev}: {r.stderr.strip()}")

    def throughput(self, sender: str, receiver: str, megabytes: float = 20.0) -> float:
        """Bytes per second one TCP stream moves from `sender` to `receiver` (the links as shaped)."""
        port = 5201
        serve = ("import socket,sys,time\n"
                 f"s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('{self.addresses[receiver]}', {port})); s.listen(1)\n"
                 "print('ready', flush=True); c,_=s.accept(); n=0; t=None\n"
                 "while True:\n"
                 "    b=c.recv(1<<20)\n"
                 "    if not b: break\n"
                 "    t=t or time.monotonic(); n+=len(b)\n"
                 "print(n/(time.monotonic()-t), flush=True)\n")
        receiver_proc = subprocess.Popen(self.prefix(receiver) + ["/usr/bin/python3", "-c", serve], stdout=subprocess.PIPE,
                                         text=True)
        receiver_proc.stdout.readline()
        send = ("import socket\n"
                f"c=socket.create_connection(('{self.addresses[receiver]}', {port})); chunk=bytes(1<<20)\n"
                f"for _ in range({int(megabytes)}): c.sendall(chunk)\n"
                "c.close()\n")
        subprocess.run(self.prefix(sender) + ["/usr/bin/python3", "-c", send], check=True)
        rate = float(receiver_proc.stdout.readline())
        receiver_proc.wait(timeout=60)
        return rate

    def counters(self, host: str) -> Dict[str, int]:
        """Bytes and packets the host's eth0 received and sent so far."""
        r = _ip("-n", self.namespaces[host], "-s", "-j", "link", "show", "eth0")
        stats = json.loads(r.stdout)[0]["stats64"]
        return {"rx_bytes": stats["rx"]["bytes"], "tx_bytes": stats["tx"]["bytes"],
                "rx_packets": stats["rx"]["packets"], "tx_packets": stats["tx"]["packets"]}


def _rate_bits(rate: str) -> int:
    units = {"gbit": 10**9, "mbit": 10**6, "kbit": 10**3, "bit": 1}
    for unit, scale in units.items():
        if rate.endswith(unit):
            return int(float(rate[: -len(unit)]) * scale)
    raise ValueError(f"rate {rate!r}: use tc's units, e.g. 100mbit or 1gbit")


def leftover_namespaces(prefix: str = "kgpt") -> List[str]:
    """Network namespaces whose names a bench would have made (for tests of the clean-up)."""
    r = _ip("netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines()
            if line.split() and line.split()[0].startswith(prefix) and "-" in line.split()[0]]
