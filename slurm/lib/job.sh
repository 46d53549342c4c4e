# Functions shared by kgpt's batch scripts; sourced by them, never run on its own.
#
# A kgpt batch job runs `kgpt train ... --auto-resume` as one srun step and handles preemption:
#   - the batch shell traps SIGUSR1 (sent by `--signal=B:USR1@N` before the time limit, or by
#     `scancel --signal=USR1 --batch JOB`), SIGUSR2 (checkpoint now) and SIGTERM, and forwards
#     each to the job's steps with `scancel --signal`;
#   - kgpt writes a checkpoint and exits with code 3 ("checkpointed, requeue me");
#   - the batch shell then requeues the job (`scontrol requeue`), which keeps its job id, so the
#     next start finds the same run directory and resumes from the newest checkpoint.
# Requeues stop after KGPT_MAX_REQUEUES restarts (default 20), so a job that keeps being stopped
# cannot loop for ever. A job the stall watchdog ended (exit code 4) is not requeued unless
# KGPT_REQUEUE_ON_STALL=1.

kgpt_die() {
  echo "kgpt job: error: $*" >&2
  exit 2
}

# The job's id as run directories name it: JOBID, or ARRAYJOBID_TASKID for an array task. It stays
# the same when the job is requeued.
kgpt_job_tag() {
  if [[ -n "${SLURM_ARRAY_JOB_ID:-}" && -n "${SLURM_ARRAY_TASK_ID:-}" ]]; then
    echo "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
  else
    echo "${SLURM_JOB_ID:?not inside a Slurm job}"
  fi
}

# The tag of the job's run directory: the job's own (kgpt_job_tag), or with KGPT_CONTINUE_JOB=ID an
# earlier job's, whose run this job continues from its newest checkpoint (kgpt train --auto-resume),
# at this job's world size: for a job lost with a node, resubmitted on the nodes left. Checked by
# kgpt_job_header.
kgpt_run_tag() {
  echo "${KGPT_CONTINUE_JOB:-$(kgpt_job_tag)}"
}

# Sets KGPT to the kgpt binary: $KGPT if set, else the first executable among the arguments.
kgpt_find_binary() {
  if [[ -z "${KGPT:-}" ]]; then
    local candidate
    for candidate in "$@"; do
      if [[ -x "$candidate" ]]; then
        KGPT="$candidate"
        break
      fi
    done
  fi
  [[ -n "${KGPT:-}" && -x "$KGPT" ]] ||
    kgpt_die "no kgpt binary (looked for ${KGPT:-$*}); build it (see README.md) or set KGPT=/path/to/kgpt"
  export KGPT
}

kgpt_job_header() {
  echo "== kgpt job $(kgpt_job_tag) (${SLURM_JOB_NAME:-?}) on ${SLURM_JOB_NODELIST:-?}: ${SLURM_NNODES:-?} node(s)," \
    "${SLURM_NTASKS:-?} tasks, ${SLURM_CPUS_PER_TASK:-1} CPUs per task, restart ${SLURM_RESTART_COUNT:-0}, $(date -Is)"
  echo "== kgpt binary: $KGPT; folder: $PWD"
  if [[ -n "${KGPT_CONTINUE_JOB:-}" ]]; then
    [[ "$KGPT_CONTINUE_JOB" =~ ^[0-9]+(_[0-9]+)?$ ]] ||
      kgpt_die "KGPT_CONTINUE_JOB='$KGPT_CONTINUE_JOB' is not a job id (1234, or 1234_5 for an array task)"
    echo "== kgpt job: continuing the run of job $KGPT_CONTINUE_JOB (KGPT_CONTINUE_JOB)"
  fi
}

# Threads and placement for every rank.
kgpt_common_env() {
  # Since Slurm 22.05 srun no longer takes --cpus-per-task from the allocation; this passes it on.
  export SRUN_CPUS_PER_TASK="${SLURM_CPUS_PER_TASK:-1}"
  # Kokkos' host backends and OpenBLAS: one thread per CPU of the task, kept on its cores.
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$SRUN_CPUS_PER_TASK}"
  export OMP_PROC_BIND="${OMP_PROC_BIND:-spread}" OMP_PLACES="${OMP_PLACES:-threads}"
  export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-$SRUN_CPUS_PER_TASK}"
}

# GPU ranks: every rank sees all GPUs of its node and drives GPU <local rank> itself.
kgpt_gpu_env() {
  kgpt_common_env
  # WARN prints NCCL's errors and warnings only; INFO (with NCCL_DEBUG_SUBSYS=INIT,NET) shows the
  # transports chosen, for a first run on a new cluster.
  export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
  # Multi-node jobs: the site's InfiniBand or RoCE settings, when NCCL's own choice is wrong, e.g.
  #   export NCCL_IB_HCA=mlx5 NCCL_SOCKET_IFNAME=ib0
  # Nothing else is set: NCCL picks NVLink/NVSwitch inside a node and the fastest network across.
  # Kokkos: warnings about its own settings are noise in batch logs.
  export KOKKOS_DISABLE_WARNINGS="${KOKKOS_DISABLE_WARNINGS:-1}"
}

kgpt_cpu_env() {
  kgpt_common_env
  export KOKKOS_DISABLE_WARNINGS="${KOKKOS_DISABLE_WARNINGS:-1}"
}

# Sends a signal the batch shell received on to the job's steps (not to the batch shell itself).
kgpt_forward_signal() {
  echo "== kgpt job: SIG$1 received $(date -Is); forwarding it to the job step"
  scancel --signal="$1" "${SLURM_JOB_ID}" || echo "kgpt job: warning: scancel --signal=$1 failed" >&2
}

# kgpt_srun_train [srun options] -- [kgpt train arguments]: one srun step of `kgpt train
# --auto-resume`, with the signals forwarded; returns its exit code.
kgpt_srun_train() {
  local srun_options=()
  while [[ $# -gt 0 && "$1" != "--" ]]; do
    srun_options+=("$1")
    shift
  done
  [[ "${1:-}" == "--" ]] && shift
  trap 'kgpt_forward_signal USR1' USR1
  trap 'kgpt_forward_signal USR2' USR2
  trap 'kgpt_forward_signal TERM' TERM
  srun --mpi=pmix --kill-on-bad-exit=1 "${srun_options[@]}" "$KGPT" train "$@" --auto-resume &
  local pid=$! status
  # A trapped signal ends `wait` early; wait again until srun itself has ended.
  while :; do
    wait "$pid"
    status=$?
    kill -0 "$pid" 2>/dev/null || break
  done
  trap - USR1 USR2 TERM
  return "$status"
}

# Ends the batch script after the step: exit code 3 (checkpointed) requeues the job; exit code 4
# (the stall watchdog ended a job whose ranks stopped making progress) ends it, or requeues it when
# KGPT_REQUEUE_ON_STALL=1 (for clusters where stalls come from flaky nodes or file systems: the
# requeued job resumes from the newest checkpoint); anything else is the job's exit code.
kgpt_finish() {
  local status=$1 restarts="${SLURM_RESTART_COUNT:-0}" limit="${KGPT_MAX_REQUEUES:-20}"
  if [[ "$status" -eq 4 ]]; then
    echo "kgpt job: error: the stall watchdog ended the job (exit code 4): a rank made no progress for" \
      "parallel.stall_timeout_s or stopped answering; its rank, step and phase are in the message above" \
      "and in the run's log.txt. The newest checkpoint is intact." >&2
    if [[ "${KGPT_REQUEUE_ON_STALL:-0}" != 1 ]]; then
      echo "== kgpt job: not requeued (KGPT_REQUEUE_ON_STALL=1 requeues a stalled job) $(date -Is)"
      exit 4
    fi
  elif [[ "$status" -ne 3 ]]; then
    echo "== kgpt job: step ended with exit code $status $(date -Is)"
    exit "$status"
  fi
  if [[ "$restarts" -ge "$limit" ]]; then
    echo "kgpt job: error: exit code $status, but the job was already restarted $restarts times" \
      "(KGPT_MAX_REQUEUES=$limit); not requeueing. Resubmit to go on." >&2
    exit "$status"
  fi
  local why="checkpointed (exit code 3)"
  [[ "$status" -eq 4 ]] && why="stalled (exit code 4, KGPT_REQUEUE_ON_STALL=1)"
  echo "== kgpt job: $why; requeueing job ${SLURM_JOB_ID} (restart $((restarts + 1))) $(date -Is)"
  if ! scontrol requeue "${SLURM_JOB_ID}"; then
    echo "kgpt job: error: scontrol requeue ${SLURM_JOB_ID} failed; resubmit the same job to resume" >&2
    exit "$status"
  fi
  exit 0
}
