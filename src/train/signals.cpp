#include "train/signals.hpp"

namespace kgpt::train {

namespace {

volatile std::sig_atomic_t received = 0;
volatile std::sig_atomic_t checkpoint_requested = 0;

extern "C" void remember_signal(int number) {
  if (number == SIGUSR2) {
    checkpoint_requested = 1;
  } else {
    received = number;
  }
}

}  // namespace

PreemptionSignals::PreemptionSignals() {
  received = 0;
  checkpoint_requested = 0;
  struct sigaction action {};
  action.sa_handler = remember_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR1, &action, &previous_usr1_);
  sigaction(SIGTERM, &action, &previous_term_);
  sigaction(SIGUSR2, &action, &previous_usr2_);
}

PreemptionSignals::~PreemptionSignals() {
  sigaction(SIGUSR1, &previous_usr1_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGUSR2, &previous_usr2_, nullptr);
}

bool PreemptionSignals::take_checkpoint_request() {
  if (checkpoint_requested == 0) return false;
  checkpoint_requested = 0;
  return true;
}

bool PreemptionSignals::requested() const { return received != 0; }

int PreemptionSignals::which() const { return static_cast<int>(received); }

}  // namespace kgpt::train
