#pragma once
// Preemption: Slurm (and schedulers like it) send SIGTERM, or SIGUSR1 with `--signal`, before they
// stop a job. While a PreemptionSignals lives, those signals only set a flag; the training loop
// looks at it at each step boundary, where all ranks agree on it, a checkpoint is written and the
// run stops. SIGUSR2 asks for a checkpoint without stopping. (mpiexec forwards SIGUSR1 and SIGUSR2
// to every rank.)

#include <csignal>

namespace kgpt::train {

class PreemptionSignals {
 public:
  PreemptionSignals();
  ~PreemptionSignals();
  PreemptionSignals(const PreemptionSignals&) = delete;
  PreemptionSignals& operator=(const PreemptionSignals&) = delete;

  bool requested() const;
  int which() const;  // the stop signal received, 0 if none
  // True once per SIGUSR2 received.
  bool take_checkpoint_request();

 private:
  struct sigaction previous_usr1_ {};
  struct sigaction previous_term_ {};
  struct sigaction previous_usr2_ {};
};

}  // namespace kgpt::train
