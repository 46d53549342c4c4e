#include "train/signals.hpp"

namespace kgpt::train {

namespace {

volatile std::sig_atomic_t received = 0;

extern "C" void remember_signal(int number) { received = number; }

}  // namespace

PreemptionSignals::PreemptionSignals() {
  received = 0;
  struct sigaction action {};
  action.sa_handler = remember_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR1, &action, &previous_usr1_);
  sigaction(SIGTERM, &action, &previous_term_);
}

PreemptionSignals::~PreemptionSignals() {
  sigaction(SIGUSR1, &previous_usr1_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
}

bool PreemptionSignals::requested() const { return received != 0; }

int PreemptionSignals::which() const { return static_cast<int>(received); }

}  // namespace kgpt::train
