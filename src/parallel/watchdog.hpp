#pragma once
// The stall watchdog (parallel.stall_timeout_s): a job whose ranks stop making progress ends with a
// message instead of waiting in a collective until the time limit.
//
// The training loop marks its progress through the phases of a step (progress(), a few atomic
// stores). A thread on every rank wakes about every timeout / 20 (at most once a second), and
// with more than one rank trades heartbeats on a communicator of its own: every rank tells rank 0
// its step, phase and how long ago it last made progress, and rank 0 tells every rank its own.
//   - Rank 0 ends the job when some rank has not been heard from for the timeout (a stopped or
//     swapped-out process, a dead node), or when no rank has made progress for the timeout (a
//     collective that never completes, a read that blocks, a GPU that stops answering).
//   - Another rank ends it when rank 0 has not been heard from for the timeout.
//   - A single rank ends its run when it has made no progress for the timeout.
// Ending means: the message (which rank, step and phase, for how long) on stderr, and in rank 0's
// run log when rank 0 ends it; the abort hooks (NCCL communicators are aborted first: destroying one
// that hangs can block for ever); then MPI_Abort with exit code 4. Checkpoints are written to a
// temporary file and renamed, and history.h5 is flushed after every row, so both stay readable.
// Health checks registered here (NCCL's asynchronous error state) are polled on every wake-up;
// an error ends the job the same way, with exit code 1.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace kgpt::parallel {

enum class Phase : int { startup, data, forward, backward, averaging, optimizer, evaluation, checkpoint, output };
const char* name_of(Phase phase);

// This rank entered `phase` of optimizer step `step` (counted from 1). Cheap; any thread.
void progress(Phase phase, std::int64_t step);
// More progress inside the current phase (another evaluation batch, another file).
void progress();
// What the rank is doing inside its phase ("reading data/x_train_000001.bin"), named if it stalls.
void progress_detail(const std::string& detail);

// How often progress() (all calls, progress_detail() included) and progress_detail() were called.
struct ProgressCalls {
  std::int64_t all = 0, detail = 0;
};
ProgressCalls progress_calls();

struct WatchdogSettings {
  double timeout_seconds = 600;  // 0: no watchdog
  std::string who = "kgpt";      // the prefix of the message: "kgpt train"
  std::string log_file;          // rank 0 appends the message here too ("" for none)
};

class StallWatchdog {
 public:
  // Collective over MPI_COMM_WORLD when the world has more than one rank.
  explicit StallWatchdog(const WatchdogSettings& settings);
  ~StallWatchdog();
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;

  bool active() const;
  // For logs: "off", or the timeout and how ranks watch ("600s (heartbeats between 8 ranks)",
  // "600s (this rank)").
  std::string summary() const;
  // CPU time the watchdog's thread has used so far (0 when off).
  double thread_cpu_seconds() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Hooks the watchdog runs before it ends the job, and health checks it polls ("" when healthy,
// else the error), on its own thread. Both stay registered while the returned handle lives;
// destroying the handle waits for a hook or check that is running.
class WatchdogHook {
 public:
  WatchdogHook() = default;
  ~WatchdogHook();
  WatchdogHook(WatchdogHook&& other) noexcept;
  WatchdogHook& operator=(WatchdogHook&& other) noexcept;
  WatchdogHook(const WatchdogHook&) = delete;
  WatchdogHook& operator=(const WatchdogHook&) = delete;

 private:
  friend WatchdogHook on_abort(std::function<void()> hook);
  friend WatchdogHook health_check(std::function<std::string()> check);
  explicit WatchdogHook(int id) : id_(id) {}
  int id_ = -1;
};

WatchdogHook on_abort(std::function<void()> hook);
WatchdogHook health_check(std::function<std::string()> check);

}  // namespace kgpt::parallel
