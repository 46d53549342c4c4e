#include "core/profile.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <utility>

#include "core/error.hpp"

namespace kgpt::profile {

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kLibraryLabel = "(library workspaces)";

struct State {
  bool on = false;
  std::string phase = "other";
  int explicit_depth = 0;  // open Regions: kernels inside them count towards them
  std::vector<Entry> table;
  std::map<std::pair<std::string, std::string>, std::size_t> index;
  struct Open {
    std::string name;
    Clock::time_point start;
    double flops;
  };
  std::vector<Open> open_kernels;
  bool tracking_memory = false;
  double live_bytes = 0, peak_bytes = 0;
  double library_bytes = 0;  // workspaces kgpt allocates for libraries, live now
  long long allocations = 0;
  std::vector<std::pair<std::string, long long>> allocation_labels;
  std::map<std::string, double> live_by_label, peak_by_label;

  void grow(const std::string& label, double bytes) {
    live_bytes += bytes;
    live_by_label[label] += bytes;
    if (live_bytes > peak_bytes) {
      peak_bytes = live_bytes;
      peak_by_label = live_by_label;
    }
  }

  void close() {
    const Open open = open_kernels.back();
    open_kernels.pop_back();
    const auto key = std::make_pair(phase, open.name);
    auto found = index.find(key);
    if (found == index.end()) {
      found = index.emplace(key, table.size()).first;
      table.push_back(Entry{phase, open.name, 0, 0, 0});
    }
    Entry& entry = table[found->second];
    entry.seconds += std::chrono::duration<double>(Clock::now() - open.start).count();
    entry.calls += 1;
    entry.flops += open.flops;
  }
};

State& state() {
  static State s;
  return s;
}

void begin_kernel(const char* name, const std::uint32_t, std::uint64_t* id) {
  State& s = state();
  *id = s.open_kernels.size();
  if (s.explicit_depth > 0) return;
  Kokkos::fence();
  s.open_kernels.push_back(State::Open{name, Clock::now(), 0});
}

void end_kernel(const std::uint64_t) {
  State& s = state();
  if (s.explicit_depth > 0 || s.open_kernels.empty()) return;
  Kokkos::fence();
  s.close();
}

bool in_memory_space(const Kokkos::Profiling::SpaceHandle handle) {
  return std::strcmp(handle.name, MemSpace::name()) == 0;
}

void allocated(const Kokkos::Profiling::SpaceHandle handle, const char* label, const void*, const std::uint64_t bytes) {
  State& s = state();
  // Kokkos's CUDA backend reports a zero-byte "TeamScratchMemory" at every team launch that asks
  // for no level-1 scratch (its pool's size stays 0, so each launch "allocates" it again; seen on an
  // H100, 59-67 per step of the test decks): nothing is allocated, so it is not counted.
  if (bytes == 0) return;
  ++s.allocations;
  const std::string where = std::string(handle.name) + ": " + label;
  auto seen = std::find_if(s.allocation_labels.begin(), s.allocation_labels.end(),
                           [&](const auto& entry) { return entry.first == where; });
  if (seen == s.allocation_labels.end()) {
    s.allocation_labels.emplace_back(where, 1);
  } else {
    ++seen->second;
  }
  if (!in_memory_space(handle)) return;
  s.grow(label, static_cast<double>(bytes));
}

void deallocated(const Kokkos::Profiling::SpaceHandle handle, const char* label, const void*, const std::uint64_t bytes) {
  if (!in_memory_space(handle)) return;
  State& s = state();
  s.live_bytes -= static_cast<double>(bytes);
  s.live_by_label[label] -= static_cast<double>(bytes);
}

// Whether callbacks other than ours are installed (a Kokkos Tools library).
bool foreign_tool_loaded() {
  const State& s = state();
  return Kokkos::Tools::profileLibraryLoaded() && !s.on && !s.tracking_memory;
}

}  // namespace

bool track_memory(bool on) {
  State& s = state();
  if (on && (s.tracking_memory || foreign_tool_loaded())) return s.tracking_memory;
  s.tracking_memory = on;
  s.live_bytes = s.peak_bytes = 0;
  s.live_by_label.clear();
  s.peak_by_label.clear();
  if (on && s.library_bytes != 0) s.grow(kLibraryLabel, s.library_bytes);
  s.allocations = 0;
  s.allocation_labels.clear();
  namespace tools = Kokkos::Tools::Experimental;
  tools::set_allocate_data_callback(on ? allocated : nullptr);
  tools::set_deallocate_data_callback(on ? deallocated : nullptr);
  return on;
}

double peak_memory_bytes() { return state().peak_bytes; }

std::vector<std::pair<std::string, double>> peak_memory_by_label() {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [label, bytes] : state().peak_by_label) {
    if (bytes > 0) out.emplace_back(label, bytes);
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

void library_memory(double bytes) {
  State& s = state();
  s.library_bytes += bytes;
  if (s.tracking_memory) s.grow(kLibraryLabel, bytes);
}

long long allocation_count() { return state().allocations; }

std::vector<std::pair<std::string, long long>> allocations_by_label() { return state().allocation_labels; }

bool available() { return state().on || !foreign_tool_loaded(); }

void enable(bool on) {
  State& s = state();
  if (on && !available()) {
    throw Error(ExitCode::bad_input,
                "profiling needs Kokkos's kernel callbacks, which the Kokkos Tools library in KOKKOS_TOOLS_LIBS "
                "holds; unset KOKKOS_TOOLS_LIBS or drop --profile");
  }
  s.on = on;
  s.table.clear();
  s.index.clear();
  s.open_kernels.clear();
  namespace tools = Kokkos::Tools::Experimental;
  tools::set_begin_parallel_for_callback(on ? begin_kernel : nullptr);
  tools::set_end_parallel_for_callback(on ? end_kernel : nullptr);
  tools::set_begin_parallel_reduce_callback(on ? begin_kernel : nullptr);
  tools::set_end_parallel_reduce_callback(on ? end_kernel : nullptr);
  tools::set_begin_parallel_scan_callback(on ? begin_kernel : nullptr);
  tools::set_end_parallel_scan_callback(on ? end_kernel : nullptr);
}

bool enabled() { return state().on; }

double process_peak_resident_bytes() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux reports KiB
}

bool regions_named() { return state().on || foreign_tool_loaded(); }

std::vector<Entry> entries() { return state().table; }

Phase::Phase(const char* name) : previous_(state().phase) {
  state().phase = name;
  Kokkos::Profiling::pushRegion(std::string("kgpt::") + name);
}

Phase::~Phase() {
  Kokkos::Profiling::popRegion();
  state().phase = previous_;
}

Region::Region(const ExecSpace& exec, const char* name, double flops) : exec_(exec) {
  if (state().on) start(name, flops);
  if (foreign_tool_loaded()) push_for_tool(name);
}

Region::Region(const ExecSpace& exec, const std::string& name, double flops) : exec_(exec) {
  if (state().on) start(name, flops);
  if (foreign_tool_loaded()) push_for_tool(name);
}

void Region::push_for_tool(const std::string& name) {
  Kokkos::Profiling::pushRegion("kgpt::" + name);
  pushed_for_tool_ = true;
}

void Region::start(const std::string& name, double flops) {
  if (state().explicit_depth > 0) return;  // inside another Region: that one counts it
  exec_.fence();
  active_ = true;
  state().open_kernels.push_back(State::Open{name, Clock::now(), flops});
  ++state().explicit_depth;
}

Region::~Region() {
  if (pushed_for_tool_) Kokkos::Profiling::popRegion();
  if (!active_) return;
  exec_.fence();
  State& s = state();
  --s.explicit_depth;
  s.close();
}

}  // namespace kgpt::profile
