"""A real Slurm cluster of several nodes on one machine, for tests: each node a host of a test
network (netbench.py) with its own address, hostname and slurmd, the controller a host of its own.

    from multinode_cluster import MultiNodeCluster

    with MultiNodeCluster(nodes=2) as cluster:       # node1, node2 (up to 4) and ctl
        job = cluster.submit("slurm/multinode.sbatch", [deck], options=["--nodes=2"], cwd=repo)
        cluster.wait(job, timeout=300)
        cluster.net.counters("node1")                  # bytes through node1's link
        cluster.net.kill_all("node2")                  # the node dies: every process in it
        cluster.net.link("node2", up=False)            # its switch port goes down

Everything of slurm_cluster.py's SlurmCluster holds (munged, the configuration in one temporary
folder, fake GPUs, requeues, the guardian that cleans up after a SIGKILLed test), with these
differences:
- slurmctld runs in the host `ctl` (198.18.0.10), as hostname `ctl`; each slurmd in its node's
  host (node1 at 198.18.0.11, ...), as hostname node1, ...; slurm.conf names each node with its
  address, so slurmctld, the slurmds, srun and the step daemons (PMIx's exchanges among them
  included) talk over the bench's links. Ports are Slurm's defaults: every host has its own.
- munged runs on the machine itself and every host reaches its socket (a file).
- Clients (sbatch, squeue, scontrol, ...) run in the host `ctl` (run(), submit(), queue(), ...):
  the machine itself has no address on the test network.
- Nodes are DOWN in Slurm's eyes 10 s after their slurmd stops answering (SlurmdTimeout=10), and
  come back by themselves when it answers again (ReturnToService=2).
- `restart_slurmd(node)` starts a node's slurmd again (after kill_all, as a node that reboots).
- stop() also removes the network: no namespace, veth or bridge is left, and the guardian does
  the same when the test is killed.
A machine that refuses network namespaces raises netbench.NamespacesRefused from start().
"""

from __future__ import annotations

import os
import subprocess
from typing import Dict, List, Mapping, Optional, Sequence

from netbench import NetworkBench
from slurm_cluster import PathLike, SlurmCluster, SlurmError

CONTROLLER = "ctl"


class MultiNodeCluster(SlurmCluster):
    def __init__(self, workdir: Optional[PathLike] = None, *, nodes: int = 2, cpus: int = 16, gpus: int = 8,
                 extra_conf: Sequence[str] = (), **kwargs):
        if not 1 <= nodes <= 4:
            raise ValueError(f"nodes: {nodes}, from 1 to 4")
        # Nodes are declared DOWN soon after their slurmd goes silent, so that faults end in a test's time.
        conf = ["SlurmdTimeout=10", "SlurmctldTimeout=10", "MessageTimeout=5", *extra_conf]
        super().__init__(workdir, cpus=cpus, gpus=gpus, extra_conf=conf, **kwargs)
        self.node_names = [f"node{i + 1}" for i in range(nodes)]
        self.net: Optional[NetworkBench] = None

    # ------------------------------------------------------------------ where things live

    def _controller_host(self) -> str:
        return f"{CONTROLLER}({self.net.addresses[CONTROLLER]})"

    def _nodes(self) -> Dict[str, str]:
        return {name: self.net.addresses[name] for name in self.node_names}

    def _choose_ports(self) -> None:
        # Each host has ports of its own: Slurm's defaults cannot be taken by anyone else.
        self.ctld_port, self.slurmd_port = 6817, 6818

    def _write_config(self, new_ports: bool = False) -> None:
        super()._write_config(new_ports)
        # Every slurmd reads the same slurm.conf: its spool folder, pid file and log are its node's
        # (%n is the node name).
        lines = []
        for line in self.conf.read_text().splitlines():
            key, _, value = line.partition("=")
            if key == "SlurmdSpoolDir":
                for node in self.node_names:
                    (self.spool / node).mkdir(mode=0o700, exist_ok=True)
                line = f"SlurmdSpoolDir={value}/%n"
            elif key == "SlurmdPidFile":
                line = f"SlurmdPidFile={self.root / 'run' / 'slurmd-%n.pid'}"
            elif key == "SlurmdLogFile":
                line = f"SlurmdLogFile={self.root / 'log' / 'slurmd-%n.log'}"
            lines.append(line)
        self.conf.write_text("\n".join(lines) + "\n")

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        # The network first: the configuration names its addresses. The guardian starts later
        # (with the configuration), so the bench's namespaces are told to it once it runs.
        self.net = NetworkBench([CONTROLLER, *self.node_names])
        self.net.start()
        try:
            super().start()
        except BaseException:
            self.net.stop()
            raise
        # start() made the guardian; from here on a SIGKILLed test still leaves no namespace behind.

    def _start_guardian(self) -> None:
        super()._start_guardian()
        for name in [self.net.switch, *self.net.namespaces.values()]:
            self._tell_guardian(f"netns {name}")

    def stop(self, failed: bool = False) -> None:
        try:
            super().stop(failed=failed)
        finally:
            if self.net is not None:
                self.net.stop()

    def _start_slurm(self) -> None:
        assert self.conf is not None and self.root is not None
        self._logs["slurmctld"] = self.root / "log" / "slurmctld.log"
        self._spawn("slurmctld", self.net.hostname_prefix(CONTROLLER) + ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait_for(lambda: self._quick(["scontrol", "ping"]) is not None,
                       "slurmctld to answer `scontrol ping`", ["slurmctld"])
        for node in self.node_names:
            self._start_slurmd(node)

        def all_idle() -> bool:
            out = self._quick(["sinfo", "-h", "-N", "-o", "%N %t"])
            states = dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2) if out else {}
            return all(states.get(node) == "idle" for node in self.node_names)

        self._wait_for(all_idle, f"nodes {', '.join(self.node_names)} to be idle in sinfo",
                       ["slurmctld", *[f"slurmd-{n}" for n in self.node_names]])

    def _start_slurmd(self, node: str) -> None:
        self._logs[f"slurmd-{node}"] = self.root / "log" / f"slurmd-{node}.log"
        # The node's own temporary folder (TmpFS, TMPDIR): PMIx and Open MPI name what they put
        # there after the job and step, which would clash between nodes sharing one folder.
        local_tmp = self.root / "nodes" / node / "tmp"
        local_tmp.mkdir(parents=True, exist_ok=True)
        os.chmod(local_tmp, 0o1777)
        prefix = self.net.hostname_prefix(node, private_dirs={str(self.root / "tmp"): str(local_tmp)})
        self._spawn(f"slurmd-{node}", prefix + ["slurmd", "-D", "-f", str(self.conf), "-N", node])

    def restart_slurmd(self, node: str, timeout: float = 60.0) -> None:
        """Starts the node's slurmd again (after net.kill_all(node)) and waits until Slurm sees it."""
        self._procs.pop(f"slurmd-{node}", None)
        self._start_slurmd(node)

        def answers() -> bool:
            out = self._quick(["sinfo", "-h", "-n", node, "-o", "%t"])
            return out is not None and out.strip() not in ("", "down", "down*", "unk", "unk*")

        saved, self.start_timeout = self.start_timeout, timeout
        try:
            self._wait_for(answers, f"{node}'s slurmd to be back", [f"slurmd-{node}"])
        finally:
            self.start_timeout = saved

    def kill_slurmd(self, node: str) -> None:
        """SIGKILLs the node's slurmd alone (its jobs' step daemons and tasks go on)."""
        proc = self._procs.get(f"slurmd-{node}")
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)

    def _stop_slurm_daemons(self) -> None:
        for node in self.node_names:
            self._stop(f"slurmd-{node}")
        self._stop("slurmctld")

    # ------------------------------------------------------------------ clients

    def _run(self, argv: Sequence[str], check: bool = True, timeout: float = 60.0,
             cwd: Optional[PathLike] = None, env: Optional[Mapping[str, str]] = None
             ) -> subprocess.CompletedProcess:
        # Clients reach slurmctld from the controller's host: the machine itself is not on the network.
        if self.net is None:
            raise SlurmError("the cluster is not started")
        return super()._run(self.net.prefix(CONTROLLER) + list(argv), check=check, timeout=timeout, cwd=cwd, env=env)

    def node_states(self) -> Dict[str, str]:
        """{node: Slurm's state of it} ("idle", "alloc", "down*", ...)."""
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False).stdout
        return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)

    def node_pids(self, node: str) -> List[int]:
        return self.net.pids(node)
