#pragma once
// Preemption: Slurm (and schedulers like it) send SIGTERM, or SIGUSR1 with `--signal`, before they
// stop a job. While a PreemptionSignals lives, those signals only set a flag; the training loop
// looks at it at each step boundary, where all ranks agree on it and a checkpoint is written.

#include <csignal>

namespace kgpt::train {

class PreemptionSignals {
 public:
  PreemptionSignals();
  ~PreemptionSignals();
  PreemptionSignals(const PreemptionSignals&) = delete;
  PreemptionSignals& operator=(const PreemptionSignals&) = delete;

  bool requested() const;
  int which() const;  // the signal number received, 0 if none

 private:
  struct sigaction previous_usr1_ {};
  struct sigaction previous_term_ {};
};

}  // namespace kgpt::train
