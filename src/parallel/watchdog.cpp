#include "parallel/watchdog.hpp"

#include <fcntl.h>
#include <mpi.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "parallel/world.hpp"

namespace kgpt::parallel {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_now() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

struct ProgressState {
  std::atomic<double> last{seconds_now()};
  std::atomic<int> phase{static_cast<int>(Phase::startup)};
  std::atomic<std::int64_t> step{0};
  std::atomic<std::int64_t> calls{0}, detail_calls{0};  // for the bench's measure of the watchdog's cost
  std::mutex detail_mutex;
  std::string detail;
};

ProgressState& progress_state() {
  static ProgressState state;
  return state;
}

struct Hooks {
  std::mutex mutex;
  int next = 0;
  std::map<int, std::function<void()>> aborts;
  std::map<int, std::function<std::string()>> checks;
};

Hooks& hooks() {
  static Hooks h;
  return h;
}

constexpr int kHeartbeatTag = 7301;
constexpr int kFinished = -1;  // the phase of a rank's last heartbeat: its watchdog stopped

// The longest detail a heartbeat carries: a whole path (PATH_MAX) and the words around it, so that a
// stall message names the file a rank waits on however deep a cluster's folders go.
constexpr std::size_t kDetailBytes = 4096 + 256;

// One heartbeat: where the sender is and how long ago it last made progress. Sent as its fixed
// fields and the detail up to its terminating zero (beat_bytes), so an empty detail costs nothing.
struct Beat {
  std::int64_t step = 0;
  double age = 0;  // seconds
  std::int32_t phase = 0;
  std::int32_t rank = 0;
  char detail[kDetailBytes] = {};
};

int beat_bytes(const Beat& b) {
  return static_cast<int>(offsetof(Beat, detail) + ::strnlen(b.detail, kDetailBytes - 1) + 1);
}

Beat own_beat(int rank) {
  ProgressState& p = progress_state();
  Beat b;
  b.rank = rank;
  b.step = p.step.load();
  b.phase = p.phase.load();
  b.age = seconds_now() - p.last.load();
  std::lock_guard<std::mutex> lock(p.detail_mutex);
  std::snprintf(b.detail, sizeof(b.detail), "%s", p.detail.c_str());
  return b;
}

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", s);
  return text;
}

std::string where(const Beat& b) {
  std::string text = "step " + std::to_string(b.step) + ", phase " + name_of(static_cast<Phase>(b.phase));
  if (b.detail[0] != '\0') text += std::string(" (") + b.detail + ")";
  return text;
}

}  // namespace

const char* name_of(Phase phase) {
  switch (phase) {
    case Phase::startup: return "startup";
    case Phase::data: return "data";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::averaging: return "averaging";
    case Phase::optimizer: return "optimizer";
    case Phase::evaluation: return "evaluation";
    case Phase::checkpoint: return "checkpoint";
    case Phase::output: return "output";
  }
  return "?";
}

void progress(Phase phase, std::int64_t step) {
  ProgressState& p = progress_state();
  if (p.phase.load(std::memory_order_relaxed) != static_cast<int>(phase)) {
    std::lock_guard<std::mutex> lock(p.detail_mutex);
    p.detail.clear();
  }
  p.step.store(step, std::memory_order_relaxed);
  p.phase.store(static_cast<int>(phase), std::memory_order_relaxed);
  p.calls.fetch_add(1, std::memory_order_relaxed);
  p.last.store(seconds_now(), std::memory_order_release);
}

void progress() {
  ProgressState& p = progress_state();
  p.calls.fetch_add(1, std::memory_order_relaxed);
  p.last.store(seconds_now(), std::memory_order_release);
}

void progress_detail(const std::string& detail) {
  ProgressState& p = progress_state();
  {
    std::lock_guard<std::mutex> lock(p.detail_mutex);
    p.detail = detail;
  }
  p.detail_calls.fetch_add(1, std::memory_order_relaxed);
  progress();
}

ProgressCalls progress_calls() {
  const ProgressState& p = progress_state();
  return {p.calls.load(std::memory_order_relaxed), p.detail_calls.load(std::memory_order_relaxed)};
}

WatchdogHook on_abort(std::function<void()> hook) {
  Hooks& h = hooks();
  std::lock_guard<std::mutex> lock(h.mutex);
  h.aborts[h.next] = std::move(hook);
  return WatchdogHook(h.next++);
}

WatchdogHook health_check(std::function<std::string()> check) {
  Hooks& h = hooks();
  std::lock_guard<std::mutex> lock(h.mutex);
  h.checks[h.next] = std::move(check);
  return WatchdogHook(h.next++);
}

WatchdogHook::~WatchdogHook() {
  if (id_ < 0) return;
  Hooks& h = hooks();
  std::lock_guard<std::mutex> lock(h.mutex);
  h.aborts.erase(id_);
  h.checks.erase(id_);
}

WatchdogHook::WatchdogHook(WatchdogHook&& other) noexcept : id_(other.id_) { other.id_ = -1; }

WatchdogHook& WatchdogHook::operator=(WatchdogHook&& other) noexcept {
  std::swap(id_, other.id_);
  return *this;
}

struct StallWatchdog::State {
  WatchdogSettings settings;
  int rank = 0, size = 1;
  bool heartbeats = false;
  MPI_Comm comm = MPI_COMM_NULL;
  std::thread thread;
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
  double started = 0;
  std::vector<double> heard;   // when each peer was last heard from (rank 0: all ranks; others: rank 0)
  std::vector<Beat> beats;     // each peer's last heartbeat
  std::vector<MPI_Request> sends;
  // Heap memory that outlives this object when a heartbeat has not left by the end (then leaked:
  // MPI may still read it).
  Beat* send_buffers = nullptr;

  double tick() const { return std::min(1.0, std::max(0.05, settings.timeout_seconds / 20)); }

  void send(int peer, const Beat& beat) {
    MPI_Request& request = sends[static_cast<std::size_t>(peer)];
    if (request != MPI_REQUEST_NULL) {
      int done = 0;
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (!done) return;  // the last one has not left yet: that peer is not receiving
    }
    send_buffers[peer] = beat;
    MPI_Isend(&send_buffers[peer], beat_bytes(beat), MPI_BYTE, peer, kHeartbeatTag, comm, &request);
  }

  void receive() {
    while (true) {
      int waiting = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kHeartbeatTag, comm, &waiting, &status) != MPI_SUCCESS || !waiting) return;
      int bytes = 0;
      MPI_Get_count(&status, MPI_BYTE, &bytes);
      Beat beat;
      MPI_Recv(&beat, std::min(bytes, static_cast<int>(sizeof(Beat))), MPI_BYTE, status.MPI_SOURCE, kHeartbeatTag, comm,
               MPI_STATUS_IGNORE);
      beat.detail[kDetailBytes - 1] = '\0';
      heard[static_cast<std::size_t>(status.MPI_SOURCE)] = seconds_now();
      beats[static_cast<std::size_t>(status.MPI_SOURCE)] = beat;
    }
  }

  void exchange() {
    const Beat mine = own_beat(rank);
    if (rank == 0) {
      for (int peer = 1; peer < size; ++peer) send(peer, mine);
    } else {
      send(0, mine);
    }
    receive();
  }

  bool finished(int peer) const { return beats[static_cast<std::size_t>(peer)].phase == kFinished; }

  // The verdict of this wake-up: "" while the job is healthy, else what went wrong.
  std::string verdict() {
    const double now = seconds_now(), timeout = settings.timeout_seconds;
    const Beat mine = own_beat(rank);
    if (!heartbeats) {
      if (mine.age < timeout) return "";
      return rank_name(rank) + " has made no progress for " + seconds_text(mine.age) + " (" + where(mine) +
             ")" + (size > 1 ? "; without MPI_THREAD_MULTIPLE the ranks cannot tell each other apart" : "");
    }
    if (rank != 0) {
      const double silent = now - heard[0];
      if (finished(0) || silent < timeout) return "";
      const bool ever = beats[0].rank == 0 && heard[0] > started;
      return rank_name(0) + " has not answered for " + seconds_text(silent) + " (stopped, swapped out or gone)" +
             (ever ? "; it was last heard at " + where(beats[0]) : std::string()) + "; " + rank_name(rank) +
             " is at " + where(mine) + " with no progress for " + seconds_text(mine.age);
    }
    std::string silent_ranks, all_ranks = rank_name(0) + " at " + where(mine) + " for " + seconds_text(mine.age);
    double youngest = mine.age;
    for (int peer = 1; peer < size; ++peer) {
      if (finished(peer)) continue;
      const std::size_t p = static_cast<std::size_t>(peer);
      const double silent = now - heard[p];
      const bool ever = heard[p] > started;
      const double age = ever ? beats[p].age + silent : silent;
      youngest = std::min(youngest, age);
      const std::string at = ever ? where(beats[p]) : "startup";
      all_ranks += "; " + rank_name(peer) + " at " + at + " for " + seconds_text(age);
      if (silent >= timeout) {
        silent_ranks += (silent_ranks.empty() ? "" : "; ") + rank_name(peer) +
                        " has not answered for " + seconds_text(silent) + " (stopped, swapped out or gone)" +
                        (ever ? "; it was last heard at " + at : std::string());
      }
    }
    if (!silent_ranks.empty()) {
      return silent_ranks + "; " + rank_name(0) + " is at " + where(mine) + " with no progress for " +
             seconds_text(mine.age);
    }
    if (youngest >= timeout) return "no rank has made progress for " + seconds_text(youngest) + ": " + all_ranks;
    return "";
  }

  [[noreturn]] void end_job(const std::string& message, ExitCode code) {
    const std::string line = settings.who + ": error: " + message + "\n";
    if (::write(STDERR_FILENO, line.data(), line.size()) < 0) {
      // Nothing more can be said; the abort below still ends the job.
    }
    if (rank == 0 && !settings.log_file.empty()) {
      const int fd = ::open(settings.log_file.c_str(), O_WRONLY | O_APPEND);
      if (fd >= 0) {
        const std::string logged = "error: " + message + "\n";
        if (::write(fd, logged.data(), logged.size()) >= 0) ::fsync(fd);
        ::close(fd);
      }
    }
    {
      // Held while the hooks run, so that none of their objects is destroyed meanwhile.
      Hooks& h = hooks();
      std::lock_guard<std::mutex> lock(h.mutex);
      for (auto& [id, hook] : h.aborts) {
        try {
          hook();
        } catch (...) {
        }
      }
    }
    abort_all(static_cast<int>(code));
  }

  std::string unhealthy() {
    // Held while the checks run, so that none of their objects is destroyed meanwhile.
    Hooks& h = hooks();
    std::lock_guard<std::mutex> lock(h.mutex);
    for (auto& [id, check] : h.checks) {
      const std::string error = check();
      if (!error.empty()) return error;
    }
    return "";
  }

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop) {
      wake.wait_for(lock, std::chrono::duration<double>(tick()));
      if (stop) break;
      lock.unlock();
      const std::string error = unhealthy();
      if (!error.empty()) end_job(rank_name(rank) + ": " + error + "; ending the job (exit code 1)", ExitCode::failure);
      if (heartbeats) exchange();
      const std::string stalled = verdict();
      if (!stalled.empty()) {
        end_job("stalled: " + stalled + ". parallel.stall_timeout_s = " + seconds_text(settings.timeout_seconds) +
                    "; ending the job (exit code 4); the newest checkpoint and history.h5 are intact",
                ExitCode::stalled);
      }
      lock.lock();
    }
    lock.unlock();
    if (heartbeats) {
      Beat last = own_beat(rank);
      last.phase = kFinished;
      if (rank == 0) {
        for (int peer = 1; peer < size; ++peer) send(peer, last);
      } else {
        send(0, last);
      }
    }
  }
};

StallWatchdog::StallWatchdog(const WatchdogSettings& settings) : state_(new State()) {
  State& s = *state_;
  s.settings = settings;
  s.rank = world().rank;
  s.size = world().size;
  if (settings.timeout_seconds <= 0) return;
  if (s.size > 1) {
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    s.heartbeats = level == MPI_THREAD_MULTIPLE;
    if (s.heartbeats) MPI_Comm_dup(MPI_COMM_WORLD, &s.comm);
  }
  s.started = seconds_now();
  s.heard.assign(static_cast<std::size_t>(s.size), s.started);
  s.beats.assign(static_cast<std::size_t>(s.size), Beat{});
  for (auto& b : s.beats) b.rank = -1;
  s.sends.assign(static_cast<std::size_t>(s.size), MPI_REQUEST_NULL);
  s.send_buffers = new Beat[static_cast<std::size_t>(s.size)];
  progress(Phase::startup, 0);
  s.thread = std::thread([&s] { s.run(); });
}

StallWatchdog::~StallWatchdog() {
  State& s = *state_;
  if (!s.thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stop = true;
  }
  s.wake.notify_all();
  s.thread.join();
  // Heartbeats nobody received are dropped when MPI finalises.
  bool all_left = true;
  for (MPI_Request& request : s.sends) {
    if (request == MPI_REQUEST_NULL) continue;
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done) {
      all_left = false;
      MPI_Request_free(&request);
    }
  }
  if (all_left) delete[] s.send_buffers;
}

bool StallWatchdog::active() const { return state_->thread.joinable(); }

double StallWatchdog::thread_cpu_seconds() const {
  if (!active()) return 0;
  clockid_t clock;
  timespec t{};
  if (pthread_getcpuclockid(state_->thread.native_handle(), &clock) != 0 || clock_gettime(clock, &t) != 0) return 0;
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::string StallWatchdog::summary() const {
  if (!active()) return "off";
  char timeout[32];
  std::snprintf(timeout, sizeof(timeout), "%gs", state_->settings.timeout_seconds);
  if (!state_->heartbeats) {
    return timeout + std::string(state_->size > 1 ? " (each rank alone: no MPI_THREAD_MULTIPLE)" : " (this rank)");
  }
  return timeout + std::string(" (heartbeats between ") + std::to_string(state_->size) + " ranks)";
}

}  // namespace kgpt::parallel
