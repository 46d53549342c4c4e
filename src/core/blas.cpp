#include "core/blas.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace kgpt {

namespace {

// Set by kgpt before it restarts itself: the kernel OpenBLAS had chosen. A process that finds it set
// was restarted, and restarts no more.
constexpr const char* kRestartedFrom = "KGPT_OPENBLAS_CHOSE";
// Set (to anything), OPENBLAS_CORETYPE stands for OpenBLAS's own choice rather than a setting by
// hand: how a machine whose CPU OpenBLAS knows shows what kgpt does where OpenBLAS picks a generic
// kernel (tests/app/test_blas.py).
constexpr const char* kAsDetected = "KGPT_OPENBLAS_AS_DETECTED";

bool coretype_by_hand() {
  return std::getenv("OPENBLAS_CORETYPE") != nullptr && std::getenv(kAsDetected) == nullptr;
}

std::string restart_failure;  // why a restart did not happen, where one was due

// The widest x86 vector units an OpenBLAS x86-64 kernel uses: 3 AVX-512, 2 AVX2, 1 AVX, 0 SSE
// (the generic kernels); -1 for a name not known here (never replaced).
int vector_level(const std::string& core) {
  static const std::set<std::string> avx512 = {"SkylakeX", "Cooperlake", "SapphireRapids"};
  static const std::set<std::string> avx2 = {"Haswell", "Zen", "Excavator"};
  static const std::set<std::string> avx = {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller"};
  static const std::set<std::string> sse = {"Prescott", "Core2",   "Penryn", "Dunnington", "Nehalem", "Opteron",
                                            "Opteron(SSE3)", "Barcelona", "Bobcat", "Atom", "Nano", "Katmai",
                                            "Coppermine", "Northwood", "Banias", "Athlon", "Unknown"};
  if (avx512.count(core)) return 3;
  if (avx2.count(core)) return 2;
  if (avx.count(core)) return 1;
  if (sse.count(core)) return 0;
  return -1;
}

// This CPU's widest vector units as the kernel lists them (it lists AVX and AVX-512 only where the
// operating system saves their registers): the same levels, -1 where /proc/cpuinfo has no flags
// (not x86-64).
int cpu_level() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.compare(0, 5, "flags") != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string flag; words >> flag;) flags.insert(flag);
    const auto has = [&](const char* flag) { return flags.count(flag) > 0; };
    // SkylakeX's kernels need these five.
    if (has("avx512f") && has("avx512bw") && has("avx512dq") && has("avx512vl") && has("avx512cd")) return 3;
    if (has("avx2") && has("fma")) return 2;
    if (has("avx")) return 1;
    return 0;
  }
  return -1;
}

const char* level_name(int level) {
  static const char* names[] = {"SSE", "AVX", "AVX2", "AVX-512"};
  return level >= 0 && level <= 3 ? names[level] : "";
}

const char* best_core(int level) {
  static const char* cores[] = {"", "Sandybridge", "Haswell", "SkylakeX"};
  return level >= 0 && level <= 3 ? cores[level] : "";
}

template <class F>
F symbol(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

BlasInfo query() {
  BlasInfo info;
  const auto config = symbol<char* (*)()>("openblas_get_config");
  const auto core = symbol<char* (*)()>("openblas_get_corename");
  const auto threads = symbol<int (*)()>("openblas_get_num_threads");
  if (void* sgemm = dlsym(RTLD_DEFAULT, "sgemm_")) {
    Dl_info where{};
    if (dladdr(sgemm, &where) != 0 && where.dli_fname != nullptr) {
      char resolved[PATH_MAX];
      info.path = realpath(where.dli_fname, resolved) != nullptr ? resolved : where.dli_fname;
    }
  }
  if (config != nullptr && core != nullptr) {
    // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64"
    std::istringstream words(config());
    std::string name, version;
    words >> name >> version;
    info.library = name + " " + version;
    info.kernel = core();
    info.threads = threads != nullptr ? threads() : 0;
  } else {
    info.library = info.path.empty() ? "none found" : "not OpenBLAS";
  }
  const int level = cpu_level();
  info.cpu = level_name(level);
  info.best = best_core(level);
  const char* restarted = std::getenv(kRestartedFrom);
  if (restarted != nullptr && std::getenv("OPENBLAS_CORETYPE") != nullptr) {
    info.chosen_by = "kgpt";
    info.detected = restarted;
  } else {
    info.chosen_by = coretype_by_hand() ? "by hand" : "OpenBLAS";
  }
  return info;
}

}  // namespace

bool BlasInfo::below_cpu() const {
  const int have = vector_level(kernel);
  return have >= 0 && !best.empty() && have < vector_level(best);
}

void choose_blas_kernel(char** argv) {
  if (coretype_by_hand() || std::getenv(kRestartedFrom) != nullptr) return;
  const BlasInfo info = query();
  if (info.kernel.empty() || !info.below_cpu()) return;
  char self[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) {
    restart_failure = std::string("cannot read /proc/self/exe: ") + std::strerror(errno);
    return;
  }
  self[length] = '\0';
  setenv("OPENBLAS_CORETYPE", info.best.c_str(), 1);
  setenv(kRestartedFrom, info.kernel.c_str(), 1);
  execv(self, argv);
  // Still here: the restart failed; go on with the kernel OpenBLAS chose, and say so.
  restart_failure = std::string("restarting ") + self + " failed: " + std::strerror(errno);
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kRestartedFrom);
}

const BlasInfo& blas_info() {
  static const BlasInfo info = query();
  return info;
}

std::string describe_blas(const BlasInfo& info) {
  std::ostringstream out;
  out << info.library;
  if (!info.path.empty()) out << " (" << info.path << ")";
  if (info.kernel.empty()) {
    out << ", kernel not known (only OpenBLAS says which it runs)";
    return out.str();
  }
  out << ", kernel " << info.kernel << ", " << info.threads << (info.threads == 1 ? " thread" : " threads");
  const std::string cpu = info.cpu.empty() ? "" : " (" + info.cpu + ")";
  if (info.chosen_by == "kgpt") {
    out << ": OpenBLAS chose " << info.detected << ", a kernel below this CPU's vector units" << cpu
        << ", so kgpt set OPENBLAS_CORETYPE=" << info.kernel << " and restarted";
  } else if (info.chosen_by == "by hand") {
    out << ": set by hand (OPENBLAS_CORETYPE), kept";
    if (info.below_cpu()) out << "; " << info.best << "'s kernel would use more of this CPU's vector units" << cpu;
  } else {
    out << ": OpenBLAS's choice";
    if (info.below_cpu()) {
      out << ", below this CPU's vector units" << cpu << "; " << info.best << "'s kernel would use more of them";
      if (!restart_failure.empty()) out << " (" << restart_failure << ")";
    } else if (!info.cpu.empty()) {
      out << " for this CPU" << cpu;
    }
  }
  return out.str();
}

}  // namespace kgpt
