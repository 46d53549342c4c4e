"""A real single-node Slurm cluster on localhost, for tests (Python standard library only).

    from slurm_cluster import SlurmCluster

    with SlurmCluster() as cluster:                 # or SlurmCluster(workdir) to put its folder there
        job = cluster.submit("slurm/cpu.sbatch", ["inputs/tiny.yaml"], options=["--time=00:05:00"],
                             cwd=repo)
        final = cluster.wait(job, timeout=120)      # {"1234": JobRecord(state="COMPLETED", ...)}
        assert final[job].state == "COMPLETED", cluster.job_report(job)

What it starts, all from Debian 12's packages (slurm-wlm 22.05.8, munge 0.5.15), configured in one
temporary folder and stopped again on exit (also on exceptions, SIGTERM, and, through a detached
guardian process, when the test process is SIGKILLed, e.g. by a ctest timeout):

- munged in the foreground on its own socket with its own key (1024 random bytes, mode 0400, owned
  by the user running it) and --force (root, and a key outside /etc/munge); --origin=127.0.0.1
  so munged needs no resolvable hostname. Nothing in /etc/munge or /run/munge is used; Slurm finds
  the socket through AuthInfo=socket=... in slurm.conf.
- slurmctld and slurmd in the foreground (-D) as children of this process, on free TCP ports (bound
  to port 0 to find them; if a daemon still finds its port taken, everything restarts on new ports),
  ClusterName kgpt<random>, SlurmctldHost=localhost, one node `hostname -s` with NodeAddr=127.0.0.1,
  `cpus` CPUs (default 128 = 8 tasks x 16, more than the machine has: SlurmdParameters=
  config_overrides) and `gpus` fake GPUs (default 8); proctrack/linuxproc, task/none (no cgroups),
  select/cons_tres with CR_Core, sched/backfill, MpiDefault=none (jobs say --mpi=pmix), one partition
  "debug" (Default=YES, MaxTime=INFINITE, OverSubscribe=YES), no preemption, ReturnToService=2,
  JobRequeue=1, KillWait=2.
- Fake GPUs: Slurm 22.05 drops GPUs without File= ("Removing file-less GPU"), and it drops a File=
  that is not a character or block device from the step's devices, in which case jobs asking
  --gpus-per-node=8 run but get no CUDA_VISIBLE_DEVICES. gres.conf (AutoDetect=off) therefore names
  <tmp>/gpu/fakegpu[0-7], symlinks to /dev/null (no mknod rights needed; with task/none nothing opens
  or constrains them): every task of a --gpus-per-node=8 job sees CUDA_VISIBLE_DEVICES=0,...,7.

Clients (sbatch, squeue, scontrol, scancel, sinfo, srun) find the cluster through SLURM_CONF in
`cluster.env`: pass that dict as the environment of anything that talks to this cluster (cluster.run()
and submit() do). sbatch exports the submitting environment to the job, so `cluster.env` also carries
what jobs need (the daemons get it too, so slurmstepd's PMIx server sees the same settings):

- PMIX_MCA_gds=hash, PMIX_MCA_psec=native. Slurm's mpi/pmix_v4 and Open MPI 4.1.4 share Debian's PMIx
  4.2.2. Measured: the defaults work on a plain Debian 12 machine, but forcing the shared-memory data
  stores (PMIX_MCA_gds=ds21 or ds12) makes `srun --mpi=pmix` hang at MPI_Init, and psec=munge makes
  PMIx_server_init fail (PMIx would talk to the system munged, which is not running): pinning hash
  and native keeps a container's or a user's environment from selecting either.
- OMPI_ALLOW_RUN_AS_ROOT=1, OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 when running as root (CI runs as root;
  direct launch under srun does not need them, an mpiexec inside a job does).
- TMPDIR=<tmp>/tmp (also TmpFS). Every cluster starts its job ids at a random FirstJobId, so two
  clusters running at once (ctest -j2) do not hand out the same job ids, and Open MPI's session
  folders and /dev/shm segments, named after the PMIx namespace slurm.pmix.<jobid>.<step>, differ.
- OMPI_MCA_btl_vader_backing_directory=<tmp>/tmp only when /dev/shm has less than 1 GiB free
  (Docker's default is 64 MiB).
- Inherited SLURM_*, SBATCH_*, SRUN_*, SALLOC_*, PMIX_*, PMI_* variables are dropped, so a test run
  inside a real Slurm job neither talks to nor inherits options from the outer cluster.
Open MPI in a container whose seccomp/ptrace rules forbid process_vm_readv (CMA) fails on large
messages ("Read -1, expected ..."); OMPI_MCA_btl_vader_single_copy_mechanism=none fixes that (pass it
in submit(env=...) or cluster.env; not set by default).

Final job states: there is no slurmdbd (so no sacct). wait() polls squeue until the job, and every
task of an array job, has left the queue, then reads
  - `scontrol -o show job <id>` (records stay for MinJobAge=3600 s): JobState, ExitCode, Restarts
    (the requeue count: the SLURM_RESTART_COUNT its last run saw), StdOut, NumTasks, ...;
  - the jobcomp/filetxt log (JobCompLoc=<tmp>/log/jobcomp.log), one line each time a job ends. A run
    that ended in a requeue is logged with the state the job already has again (PENDING); JobRecord.
    history calls it "REQUEUED", so a job requeued once and then completed has the history
    ["REQUEUED", "COMPLETED"] and restarts == 1.
Array tasks are keyed "ARRAYID_TASK" (e.g. "1230_2"), plain jobs by their id.

Requeue: `scontrol requeue $SLURM_JOB_ID` inside a running job makes slurmctld kill the job at once
("CANCELLED ... DUE TO JOB REQUEUE" in its output; the batch script may not reach its own `exit`),
and the job returns to PENDING with BeginTime = now + cred_expire + 1 s: Slurm holds requeued jobs
for the job-credential lifetime, 120 s by default. AuthInfo=...,cred_expire=10 here (constructor
argument; Slurm's minimum is 5), and SchedulerParameters=sched_interval=1,bf_interval=1, since with
the default 60 s main loop a requeued job stayed pending ~30 s after its BeginTime. A requeue cycle
thus takes ~12 s. Restarts/SLURM_RESTART_COUNT count requeues.

Debugging: SlurmCluster(keep=True) or KGPT_SLURM_KEEP=1 keeps the temporary folder (configs, daemon
logs under log/, jobcomp log); KGPT_SLURM_KEEP_ON_FAILURE=1 keeps it only when the `with` block
raised; KGPT_SLURM_DEBUG=1 makes the daemons log at debug level. SlurmError messages carry the tails
of the daemon logs, and from wait(), the job's state and the tail of its output files.

Needs root (slurmd runs jobs as the submitting user; SlurmUser and SlurmdUser are the current user).
Start-up takes about 0.6 s; stop about 0.5 s plus cancelling any jobs still in the queue.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import random
import re
import shutil
import signal as _signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Union

PathLike = Union[str, os.PathLike]

# Job states in which a job is still in the queue (squeue's default filter shows exactly these).
ACTIVE_STATES = {
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUED", "REQUEUE_FED",
    "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD",
}

_DROPPED_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_", "SCANCEL_", "SINFO_",
                         "PMIX_", "PMI_", "OMPI_MCA_pmix", "OMPI_MCA_ess")

# A UNIX socket path must fit in sun_path (108 bytes); slurmd also puts step sockets
# "<spool>/<node>_<job>.<step>" in its spool folder.
_MAX_SOCKET_DIR = 70


class SlurmError(RuntimeError):
    """A Slurm daemon or command failed; the message carries the relevant log tails."""


@dataclasses.dataclass
class JobRecord:
    """Final (or current) state of one job, or of one task of an array job."""

    job_id: str                  # "1234", or "1230_4" for task 4 of array job 1230
    state: str                   # JobState from scontrol, e.g. COMPLETED, FAILED, CANCELLED, TIMEOUT
    exit_code: str               # "0:0" = exit status:signal of the batch script
    restarts: int                # times the job was requeued (SLURM_RESTART_COUNT of its last run)
    history: List[str]           # how every run of this job ended, from the jobcomp log, oldest
                                 # first: "REQUEUED" for a run that was requeued, then the final state
    fields: Dict[str, str]       # everything `scontrol -o show job` printed

    @property
    def exit_status(self) -> int:
        return int(self.exit_code.split(":")[0]) if self.exit_code else -1

    @property
    def stdout(self) -> Optional[str]:
        return self.fields.get("StdOut")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: PathLike, lines: int = 30) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"<{path}: {e.strerror}>"
    return "\n".join(text.splitlines()[-lines:])


def _parse_key_values(line: str) -> Dict[str, str]:
    """'A=1 B=x y C=2' -> {'A': '1', 'B': 'x y', 'C': '2'}: a value runs up to the next ' Key='."""
    out: Dict[str, str] = {}
    parts = re.split(r"\s+(?=[A-Za-z][A-Za-z0-9_:/]*=)", line.strip())
    for part in parts:
        key, sep, value = part.partition("=")
        if sep:
            out[key] = value
    return out


def _record_id(fields: Mapping[str, str]) -> str:
    array_job, task = fields.get("ArrayJobId"), fields.get("ArrayTaskId")
    if array_job and task is not None and task != "":
        return f"{array_job}_{task}"
    return fields.get("JobId", "?")


def _pids_with_env(marker: bytes, exclude: Iterable[int] = ()) -> List[int]:
    """Processes whose environment holds the exact entry `marker` (b"NAME=value")."""
    skip = set(exclude) | {os.getpid()}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            found.append(int(entry))
    return found


def _kill_env_holders(marker: bytes, exclude: Iterable[int] = ()) -> None:
    """SIGKILLs every process carrying `marker` in its environment (a few rounds, for forks)."""
    for _ in range(5):
        found = _pids_with_env(marker, exclude)
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, _signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.2)


def _guardian_main(root: str, conf: str, keep: str, sock_dir: str) -> None:
    """Runs in a detached process: when the test process dies without stopping the cluster (SIGKILL,
    a ctest timeout), stops the daemons, kills the jobs and removes the folder."""
    pids: List[int] = []
    namespaces: List[str] = []
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["stopped"]:
            return
        if words[:1] == ["pid"] and len(words) >= 2:
            pids.append(int(words[1]))
        if words[:1] == ["netns"] and len(words) >= 2:
            namespaces.append(words[1])
    # EOF without "stopped": the owner is gone.
    marker = f"SLURM_CONF={conf}".encode()
    mine = []
    for pid in pids:      # only our daemons: their command line names our folder
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            if root.encode() in cmdline or (sock_dir and sock_dir.encode() in cmdline):
                mine.append(pid)
        except OSError:
            pass
    for pid in mine:
        try:
            os.kill(pid, _signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") and
                                              "Z" not in _proc_state(p) for p in mine):
        time.sleep(0.1)
    for pid in mine:
        try:
            os.kill(pid, _signal.SIGKILL)
        except ProcessLookupError:
            pass
    _kill_env_holders(marker)
    if namespaces:      # multinode_cluster.py's hosts, and every process left in them
        import netbench
        for name in reversed(namespaces):
            netbench.kill_namespace(name)
    if keep != "1":
        shutil.rmtree(root, ignore_errors=True)
        if sock_dir:
            shutil.rmtree(sock_dir, ignore_errors=True)


def _proc_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


_GUARDIAN_CODE = """
import os, sys
if os.fork():            # detach: a ctest timeout kills the test's process tree, not this one
    os._exit(0)
os.setsid()
sys.path.insert(0, sys.argv[1])
import slurm_cluster
slurm_cluster._guardian_main(*sys.argv[2:])
"""


class SlurmCluster:
    """Single-node Slurm (munged + slurmctld + slurmd) in a temporary folder; a context manager."""

    def __init__(self, workdir: Optional[PathLike] = None, *, cpus: int = 128, gpus: int = 8,
                 real_memory_mb: int = 16384, start_timeout: float = 60.0,
                 keep: Optional[bool] = None, debug: Optional[bool] = None,
                 cred_expire: int = 10, extra_conf: Sequence[str] = ()):
        self.workdir = Path(workdir) if workdir is not None else None
        self.cpus = cpus
        self.gpus = gpus
        self.real_memory_mb = real_memory_mb
        self.start_timeout = start_timeout
        self.keep = keep if keep is not None else os.environ.get("KGPT_SLURM_KEEP", "") not in ("", "0")
        self.debug = debug if debug is not None else os.environ.get("KGPT_SLURM_DEBUG", "") not in ("", "0")
        self.extra_conf = list(extra_conf)
        self.cred_expire = max(5, int(cred_expire))
        self.nodename = socket.gethostname().split(".")[0]
        self.user = pwd.getpwuid(os.getuid()).pw_name
        self.cluster_name = "kgpt" + uuid.uuid4().hex[:8]
        self.root: Optional[Path] = None
        self.conf: Optional[Path] = None
        self.env: Dict[str, str] = {}
        self._procs: Dict[str, subprocess.Popen] = {}
        self._logs: Dict[str, Path] = {}
        self._sock_dir: Optional[Path] = None
        self._guardian: Optional[subprocess.Popen] = None
        self._guardian_pipe = None
        self._old_sigterm = None
        self._log_offsets: Dict[str, int] = {}

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> "SlurmCluster":
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop(failed=exc_type is not None)

    def start(self) -> None:
        for tool in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo"):
            if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None:
                raise SlurmError(f"'{tool}' not found: install Debian's slurm-wlm and munge "
                                 "(apt-get install -y slurm-wlm munge)")
        parent = str(self.workdir) if self.workdir is not None else None
        if self.workdir is not None:
            self.workdir.mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix="kgpt-slurm-", dir=parent)).resolve()
        self._install_sigterm_handler()
        try:
            self._write_config()
            self._start_guardian()
            self._start_munged()
            attempts = 3
            for attempt in range(attempts):
                try:
                    self._start_slurm()
                    break
                except SlurmError as e:
                    # A free port can be taken by someone else between our probe and the daemon's
                    # bind; then start again on new ports.
                    if "Address already in use" not in str(e) or attempt == attempts - 1:
                        raise
                    self._stop_slurm_daemons()
                    self._write_config(new_ports=True)
        except BaseException:
            self.stop(failed=True)
            raise

    def stop(self, failed: bool = False) -> None:
        """Cancels all jobs, stops the daemons and every process of this cluster, removes the folder."""
        if self.root is None:
            return
        steps = [self._cancel_everything, self._stop_slurm_daemons, self._kill_leftovers,
                 lambda: self._stop("munged"), self._stop_guardian]
        try:
            for step in steps:      # each step runs even if an earlier one failed
                try:
                    step()
                except Exception as e:  # noqa: BLE001 - stopping must go on
                    print(f"[slurm_cluster] warning while stopping: {e!r}", file=sys.stderr, flush=True)
        finally:
            self._restore_sigterm_handler()
            if self.keep or (failed and os.environ.get("KGPT_SLURM_KEEP_ON_FAILURE", "") not in ("", "0")):
                print(f"[slurm_cluster] kept {self.root}", flush=True)
            else:
                shutil.rmtree(self.root, ignore_errors=True)
                if self._sock_dir is not None:
                    shutil.rmtree(self._sock_dir, ignore_errors=True)
            self.root = None

    # ------------------------------------------------------------------ configuration

    def _write_config(self, new_ports: bool = False) -> None:
        root = self.root
        assert root is not None
        for sub in ("etc", "state", "spool", "log", "run", "tmp", "gpu", "munge"):
            (root / sub).mkdir(mode=0o700, exist_ok=True)
        os.chmod(root / "tmp", 0o1777)
        # Sockets need short paths; a deep workdir gets its sockets in a short folder of their own.
        if len(str(root)) > _MAX_SOCKET_DIR and self._sock_dir is None:
            self._sock_dir = Path(tempfile.mkdtemp(prefix="kgpt-slurm-sock-"))
        sock_dir = self._sock_dir or root
        self.munge_socket = (self._sock_dir / "munge.sock") if self._sock_dir else root / "munge" / "munge.sock"
        spool = (sock_dir / "spool") if self._sock_dir else root / "spool"
        spool.mkdir(mode=0o700, exist_ok=True)
        self.spool = spool

        if new_ports or not hasattr(self, "ctld_port"):
            self._choose_ports()

        gpu_files = []
        for i in range(self.gpus):
            # stat() must see a character device, or slurmd drops the GPU's device entry and no
            # CUDA_VISIBLE_DEVICES is set for tasks; a symlink to /dev/null needs no mknod rights.
            # With TaskPlugin=task/none nothing constrains or opens these devices.
            f = root / "gpu" / f"fakegpu{i}"
            if not f.is_symlink():
                f.symlink_to("/dev/null")
            gpu_files.append(f)
        self.conf = root / "etc" / "slurm.conf"
        self.jobcomp_log = root / "log" / "jobcomp.log"
        log = root / "log"
        run = root / "run"
        level = "debug" if self.debug else "info"
        # Random first job id: concurrent clusters never hand out the same job id (Open MPI and PMIx
        # name shared folders after it).
        first_job_id = random.randint(1000, 60_000_000)
        gres = f"gpu:{self.gpus}" if self.gpus > 0 else ""
        lines = [
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={self._controller_host()}",
            f"SlurmctldPort={self.ctld_port}",
            f"SlurmdPort={self.slurmd_port}",
            f"SlurmUser={self.user}",
            f"SlurmdUser={self.user}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # cred_expire also sets how long a requeued job waits before it may start again
            # (default 120 s; 5 is the minimum Slurm accepts).
            f"AuthInfo=socket={self.munge_socket},cred_expire={self.cred_expire}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={spool}",
            f"SlurmctldPidFile={run / 'slurmctld.pid'}",
            f"SlurmdPidFile={run / 'slurmd.pid'}",
            f"SlurmctldLogFile={log / 'slurmctld.log'}",
            f"SlurmdLogFile={log / 'slurmd.log'}",
            f"SlurmctldDebug={level}",
            f"SlurmdDebug={level}",
            f"TmpFS={root / 'tmp'}",
            f"PlugStackConfig={root / 'etc' / 'plugstack.conf'}",
            "MailProg=/bin/true",
            f"FirstJobId={first_job_id}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SwitchType=switch/none",
            "MpiDefault=none",
            "LaunchType=launch/slurm",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            # The main scheduling loop and the backfill pass every second (the defaults, 60 s and 30 s, leave
            # a requeued job pending long after its BeginTime: time passing alone wakes neither).
            "SchedulerParameters=sched_interval=1,bf_interval=1,sched_min_interval=0,batch_sched_delay=0",
            "PriorityType=priority/basic",
            "PreemptType=preempt/none",
            "PreemptMode=OFF",
            "ReturnToService=2",
            "JobRequeue=1",
            "KillWait=2",
            "InactiveLimit=0",
            "MinJobAge=3600",
            "MessageTimeout=20",
            "SlurmctldTimeout=60",
            "SlurmdTimeout=120",
            "Waittime=0",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={self.jobcomp_log}",
            "SlurmdParameters=config_overrides",
            "GresTypes=gpu",
            *[(f"NodeName={name} NodeHostname={name} NodeAddr={address} "
               f"CPUs={self.cpus} Boards=1 SocketsPerBoard=1 CoresPerSocket={self.cpus} ThreadsPerCore=1 "
               f"RealMemory={self.real_memory_mb}" + (f" Gres={gres}" if gres else "") + " State=UNKNOWN")
              for name, address in self._nodes().items()],
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES",
        ]
        # extra_conf lines replace the default lines with the same key (e.g. "KillWait=30",
        # "PartitionName=debug ..."); other lines are added.
        for extra in self.extra_conf:
            key = extra.split("=", 1)[0].strip().lower()
            lines = [line for line in lines if line.split("=", 1)[0].strip().lower() != key]
            lines.append(extra)
        self.conf.write_text("\n".join(lines) + "\n")
        (root / "etc" / "plugstack.conf").write_text("")
        gres_lines = ["AutoDetect=off"]
        if self.gpus > 0:
            files = f"{root / 'gpu'}/fakegpu[0-{self.gpus - 1}]" if self.gpus > 1 else str(gpu_files[0])
            for name in self._nodes():
                gres_lines.append(f"NodeName={name} Name=gpu File={files}")
        (root / "etc" / "gres.conf").write_text("\n".join(gres_lines) + "\n")

        key = root / "munge" / "munge.key"
        if not key.exists():
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(1024))
        self.munge_key = key

        env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_ENV_PREFIXES)}
        env["SLURM_CONF"] = str(self.conf)
        env["TMPDIR"] = str(root / "tmp")
        env["PMIX_MCA_gds"] = "hash"
        env["PMIX_MCA_psec"] = "native"
        try:
            shm_free = shutil.disk_usage("/dev/shm").free
        except OSError:
            shm_free = 0
        if shm_free < 1 << 30:
            # Docker's default /dev/shm is 64 MiB, too small for Open MPI's shared-memory segments
            # of 8 ranks: keep them in the cluster's folder instead.
            env["OMPI_MCA_btl_vader_backing_directory"] = str(root / "tmp")
        if os.getuid() == 0:
            env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        path = env.get("PATH", "/usr/bin:/bin")
        for d in ("/usr/sbin", "/sbin"):
            if d not in path.split(":"):
                path += ":" + d
        env["PATH"] = path
        self.env = env

    # Where the daemons live: one node, this machine, on loopback. (multinode_cluster.py puts the
    # controller and each node in a network namespace of its own.)
    def _controller_host(self) -> str:
        return "localhost"

    def _nodes(self) -> Dict[str, str]:
        """{node name: address} of the cluster's nodes."""
        return {self.nodename: "127.0.0.1"}

    def _choose_ports(self) -> None:
        self.ctld_port = _free_port()
        self.slurmd_port = _free_port()
        while self.slurmd_port == self.ctld_port:
            self.slurmd_port = _free_port()

    # ------------------------------------------------------------------ daemons

    def _spawn(self, name: str, argv: List[str]) -> subprocess.Popen:
        assert self.root is not None
        out = self.root / "log" / f"{name}.stdout"
        self._logs.setdefault(name + ".stdout", out)
        log = self._logs.get(name)
        self._log_offsets[name] = log.stat().st_size if log is not None and log.exists() else 0
        with open(out, "ab") as f:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                    env=self.env, cwd=str(self.root), start_new_session=True)
        self._procs[name] = proc
        self._tell_guardian(f"pid {proc.pid} {name}")
        return proc

    def _alive(self, name: str) -> bool:
        p = self._procs.get(name)
        return p is not None and p.poll() is None

    def _start_munged(self) -> None:
        assert self.root is not None
        m = self.root / "munge"
        self._logs["munged"] = m / "munged.log"
        self._spawn("munged", [
            "munged", "--foreground", "--force", f"--socket={self.munge_socket}",
            f"--key-file={self.munge_key}", f"--pid-file={m / 'munged.pid'}",
            f"--log-file={m / 'munged.log'}", f"--seed-file={m / 'munged.seed'}",
            "--num-threads=4", "--origin=127.0.0.1",
        ])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if not self._alive("munged"):
                raise SlurmError("munged exited at start\n" + self._daemon_logs())
            if self.munge_socket.exists():
                probe = subprocess.run(["munge", "-n", f"--socket={self.munge_socket}"],
                                       capture_output=True, env=self.env)
                if probe.returncode == 0:
                    return
            time.sleep(0.1)
        raise SlurmError("munged did not come up in 20 s\n" + self._daemon_logs())

    def _start_slurm(self) -> None:
        assert self.conf is not None and self.root is not None
        self._logs["slurmctld"] = self.root / "log" / "slurmctld.log"
        self._logs["slurmd"] = self.root / "log" / "slurmd.log"
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        # slurmd registers with slurmctld, so give slurmctld its socket first.
        self._wait_for(lambda: self._quick(["scontrol", "ping"]) is not None,
                       "slurmctld to answer `scontrol ping`", ["slurmctld"])
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", self.nodename])

        def node_idle() -> bool:
            out = self._quick(["sinfo", "-h", "-N", "-o", "%N %t"])
            return out is not None and any(
                line.split()[:2] == [self.nodename, "idle"] for line in out.splitlines())

        self._wait_for(node_idle, f"node {self.nodename} to be idle in sinfo", ["slurmctld", "slurmd"])

    def _quick(self, argv: Sequence[str], timeout: float = 3.0) -> Optional[str]:
        """stdout of a client command that succeeded within `timeout` s, else None (start-up probes:
        a port taken by some other program may accept the connection and never answer)."""
        try:
            r = self._run(argv, check=False, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return r.stdout if r.returncode == 0 else None

    def _fatal_in_log(self, name: str) -> Optional[str]:
        """The first 'fatal:' line the daemon logged since it was started, if any."""
        path = self._logs.get(name)
        if path is None:
            return None
        try:
            with open(path, "rb") as f:
                f.seek(self._log_offsets.get(name, 0))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return None
        for line in text.splitlines():
            if "fatal:" in line:
                return line.strip()
        return None

    def _wait_for(self, predicate, what: str, daemons: Iterable[str]) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            for d in daemons:
                if not self._alive(d):
                    raise SlurmError(f"{d} exited (code {self._procs[d].poll()}) while waiting for "
                                     f"{what}\n" + self._daemon_logs())
                # slurmctld takes ~20 s to exit after e.g. "fatal: ... Address already in use".
                fatal = self._fatal_in_log(d)
                if fatal:
                    raise SlurmError(f"{d} failed while waiting for {what}: {fatal}\n" + self._daemon_logs())
            if predicate():
                return
            if time.monotonic() > deadline:
                raise SlurmError(f"timed out after {self.start_timeout:.0f} s waiting for {what}\n"
                                 + self._daemon_logs())
            time.sleep(0.2)

    def _stop(self, name: str, timeout: float = 10.0) -> None:
        p = self._procs.get(name)
        if p is None:
            return
        if p.poll() is None:
            try:
                p.send_signal(_signal.SIGTERM)
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
            except ProcessLookupError:
                pass
        del self._procs[name]

    def _stop_slurm_daemons(self) -> None:
        self._stop("slurmd")
        self._stop("slurmctld")

    def _cancel_everything(self) -> None:
        if not self._alive("slurmctld"):
            return
        r = self._run(["squeue", "-h", "-o", "%A"], check=False, timeout=20)
        ids = sorted(set(r.stdout.split())) if r.returncode == 0 else []
        if not ids:
            return
        self._run(["scancel", *ids], check=False)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = self._run(["squeue", "-h", "-o", "%A"], check=False)
            if r.returncode != 0 or not r.stdout.strip():
                return
            time.sleep(0.3)

    def _kill_leftovers(self) -> None:
        """SIGKILL every process that still carries this cluster's SLURM_CONF (slurmstepd, tasks)."""
        if self.conf is not None:
            _kill_env_holders(f"SLURM_CONF={self.conf}".encode())

    def _start_guardian(self) -> None:
        """A detached watcher that cleans up if this process dies without calling stop()."""
        assert self.root is not None and self.conf is not None
        self._guardian = subprocess.Popen(
            [sys.executable, "-c", _GUARDIAN_CODE, str(Path(__file__).resolve().parent), str(self.root),
             str(self.conf), "1" if self.keep else "0", str(self._sock_dir or "")],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, env={k: v for k, v in os.environ.items() if k != "SLURM_CONF"})
        self._guardian.wait()    # the intermediate process exits at once; its child keeps the pipe
        self._guardian_pipe = self._guardian.stdin

    def _tell_guardian(self, line: str) -> None:
        if self._guardian_pipe is not None:
            try:
                self._guardian_pipe.write((line + "\n").encode())
                self._guardian_pipe.flush()
            except (BrokenPipeError, ValueError):
                pass

    def _stop_guardian(self) -> None:
        if self._guardian_pipe is not None:
            self._tell_guardian("stopped")
            try:
                self._guardian_pipe.close()
            except OSError:
                pass
            self._guardian_pipe = None

    def _install_sigterm_handler(self) -> None:
        """SIGTERM (e.g. from `timeout`) becomes SystemExit, so __exit__ still stops the cluster."""
        if threading.current_thread() is not threading.main_thread():
            return
        if _signal.getsignal(_signal.SIGTERM) is _signal.SIG_DFL:
            def on_sigterm(signum, frame):
                raise SystemExit(128 + signum)
            self._old_sigterm = _signal.SIG_DFL
            _signal.signal(_signal.SIGTERM, on_sigterm)

    def _restore_sigterm_handler(self) -> None:
        if self._old_sigterm is not None and threading.current_thread() is threading.main_thread():
            _signal.signal(_signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    def _daemon_logs(self, lines: int = 25) -> str:
        parts = []
        for name, path in self._logs.items():
            if path.exists():
                parts.append(f"--- tail of {path} ---\n{_tail(path, lines)}")
        return "\n".join(parts)

    def daemon_logs(self, lines: int = 25) -> str:
        """Tails of munged, slurmctld and slurmd logs (for error messages)."""
        return self._daemon_logs(lines)

    # ------------------------------------------------------------------ clients

    def _run(self, argv: Sequence[str], check: bool = True, timeout: float = 60.0,
             cwd: Optional[PathLike] = None, env: Optional[Mapping[str, str]] = None
             ) -> subprocess.CompletedProcess:
        r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                           env=dict(env) if env is not None else self.env,
                           cwd=str(cwd) if cwd is not None else None)
        if check and r.returncode != 0:
            raise SlurmError(f"`{' '.join(argv)}` failed with code {r.returncode}\n"
                             f"stdout: {r.stdout.strip()}\nstderr: {r.stderr.strip()}\n" + self._daemon_logs())
        return r

    def run(self, argv: Sequence[str], check: bool = True, timeout: float = 60.0,
            cwd: Optional[PathLike] = None, env: Optional[Mapping[str, str]] = None) -> subprocess.CompletedProcess:
        """Runs a client command (scontrol, squeue, sinfo, srun, ...) against this cluster; text output.
        env: extra variables (on top of cluster.env)."""
        return self._run(argv, check=check, timeout=timeout, cwd=cwd, env={**self.env, **(env or {})})

    def submit(self, script: PathLike, args: Sequence[str] = (), options: Sequence[str] = (),
               cwd: Optional[PathLike] = None, env: Optional[Mapping[str, str]] = None) -> str:
        """`sbatch --parsable [options] script [args]`; returns the job id ("1234").

        env: extra variables for the job (on top of cluster.env, which sbatch exports to the job).
        """
        job_env = dict(self.env)
        if env:
            job_env.update(env)
        r = self._run(["sbatch", "--parsable", *options, str(script), *args], cwd=cwd, env=job_env)
        job_id = r.stdout.strip().splitlines()[-1].split(";")[0].strip()
        if not job_id.isdigit():
            raise SlurmError(f"cannot parse the job id from sbatch's output {r.stdout!r}")
        return job_id

    def queue(self, job_id: Optional[str] = None) -> Dict[str, str]:
        """{job id: state} of the jobs still in the queue (array tasks as 'A_i'; pending ranges 'A_[1-4]')."""
        argv = ["squeue", "-h", "-o", "%i %T"]
        if job_id is not None:
            argv += ["-j", str(job_id)]
        r = self._run(argv, check=False)
        if r.returncode != 0:
            if "Invalid job id" in r.stderr:
                return {}
            raise SlurmError(f"squeue failed: {r.stderr.strip()}\n" + self._daemon_logs())
        out = {}
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 2:
                out[parts[0]] = parts[1]
        return out

    def jobcomp_records(self) -> List[Dict[str, str]]:
        """Every line of the jobcomp/filetxt log (one per job end, requeues included), parsed."""
        try:
            text = self.jobcomp_log.read_text(errors="replace")
        except FileNotFoundError:
            return []
        return [_parse_key_values(line) for line in text.splitlines() if line.strip()]

    def states(self, job_id: str) -> Dict[str, JobRecord]:
        """Current records of a job (all tasks of an array job), keyed by 'ID' or 'ARRAYID_TASK'."""
        job_id = str(job_id)
        r = self._run(["scontrol", "-o", "show", "job", job_id], check=False)
        if r.returncode != 0 and "Invalid job id" not in r.stderr:
            raise SlurmError(f"scontrol show job {job_id} failed: {r.stderr.strip()}\n" + self._daemon_logs())
        base = job_id.split("_")[0]
        history: Dict[str, List[str]] = {}
        for rec in self.jobcomp_records():
            if rec.get("JobId") == base or rec.get("ArrayJobId") == base or _record_id(rec) == job_id:
                # A requeue is logged with the state the job already has again (PENDING).
                state = rec.get("JobState", "?")
                history.setdefault(_record_id(rec), []).append(
                    "REQUEUED" if state in ACTIVE_STATES else state)
        out: Dict[str, JobRecord] = {}
        for line in r.stdout.splitlines() if r.returncode == 0 else []:
            if not line.strip():
                continue
            f = _parse_key_values(line)
            rid = _record_id(f)
            state = f.get("JobState", "?")
            out[rid] = JobRecord(job_id=rid, state=state, exit_code=f.get("ExitCode", ""),
                                 restarts=int(f.get("Restarts", "0") or 0),
                                 history=history.get(rid, []) or history.get(f.get("JobId", ""), []),
                                 fields=f)
        return out

    def wait(self, job_id: str, timeout: float = 120.0, poll: float = 0.5) -> Dict[str, JobRecord]:
        """Waits until the job (every task of an array job) has left the queue; returns the final
        records (see states()). On timeout raises SlurmError with the job's state and output tail."""
        job_id = str(job_id)
        deadline = time.monotonic() + timeout
        while True:
            active = self.queue(job_id)
            if not active:
                break
            if time.monotonic() > deadline:
                raise SlurmError(f"job {job_id} still in the queue after {timeout:.0f} s: {active}\n"
                                 + self._job_report(job_id))
            time.sleep(poll)
        # The jobcomp line is written when the job ends; give it a moment to appear for every task.
        records = self.states(job_id)
        settle = time.monotonic() + 5
        while time.monotonic() < settle and any(
                rec.state not in ACTIVE_STATES and (not rec.history or rec.history[-1] != rec.state)
                for rec in records.values()):
            time.sleep(0.2)
            records = self.states(job_id)
        if not records:
            raise SlurmError(f"job {job_id} is unknown to slurmctld\n" + self._daemon_logs())
        return records

    def _job_report(self, job_id: str, lines: int = 40) -> str:
        parts = []
        try:
            recs = self.states(job_id)
        except SlurmError as e:
            return str(e)
        seen = set()
        for rid, rec in recs.items():
            parts.append(f"{rid}: {rec.state} exit {rec.exit_code} restarts {rec.restarts} "
                         f"reason {rec.fields.get('Reason', '?')}")
            for key in ("StdOut", "StdErr"):
                path = rec.fields.get(key)
                if path and path not in seen:
                    seen.add(path)
                    parts.append(f"--- tail of {path} ---\n{_tail(path, lines)}")
        parts.append(self._daemon_logs(15))
        return "\n".join(parts)

    def job_report(self, job_id: str, lines: int = 40) -> str:
        """Human-readable state, output tails and daemon log tails of a job, for assertion messages."""
        return self._job_report(str(job_id), lines)

    def scancel(self, job_id: str, signal: Optional[str] = None, batch: bool = False,
                full: bool = False, check: bool = True) -> subprocess.CompletedProcess:
        """scancel [--signal=SIG] [--batch] [--full] JOB. Without a signal the job is cancelled.
        With one, it goes to every step but not to the batch shell; batch=True: to the batch shell
        (and its children) only, as `--signal=B:SIG@N` does; full=True: to the batch shell and
        every step."""
        argv = ["scancel"]
        if signal:
            argv.append(f"--signal={signal}")
        if batch:
            argv.append("--batch")
        if full:
            argv.append("--full")
        argv.append(str(job_id))
        return self._run(argv, check=check)

    def requeue(self, job_id: str) -> None:
        """scontrol requeue JOB (see the module notes on the requeue delay)."""
        self._run(["scontrol", "requeue", str(job_id)])
