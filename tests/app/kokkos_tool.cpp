// A Kokkos Tools library, written here to the tools' callback interface (the kokkosp_* functions
// Kokkos looks up in the library that KOKKOS_TOOLS_LIBS names), for tests/app/test_kokkos_tools.py.
// It counts every kernel by kind and name, follows the regions pushed and popped, and when Kokkos
// finalizes it writes what it saw to $KGPT_TOOL_REPORT.<MPI rank>, with whether MPI was still
// running then:
//   init <interface version>
//   kernel <for|reduce|scan> <calls> <name>
//   region <pushes> <name>
//   finalize mpi_running=<0|1> open_kernels=<n> unknown_ends=<n> region_depth=<n> unmatched_pops=<n>
//            max_region_depth=<n>
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <utility>

namespace {

struct Seen {
  std::uint64_t interface_version = 0;
  std::map<std::pair<std::string, std::string>, long long> kernels;  // (kind, name) -> calls
  std::map<std::uint64_t, std::string> open_kernels;                 // kernel id -> name
  std::uint64_t next_id = 1;
  long long unknown_ends = 0;
  std::map<std::string, long long> regions;  // name -> pushes
  long long depth = 0, max_depth = 0, unmatched_pops = 0;
  int rank = -1;
};

Seen& seen() {
  static Seen s;
  return s;
}

void begin(const char* kind, const char* name, std::uint64_t* id) {
  Seen& s = seen();
  ++s.kernels[{kind, name}];
  *id = s.next_id++;
  s.open_kernels[*id] = name;
}

void end(std::uint64_t id) {
  Seen& s = seen();
  if (s.open_kernels.erase(id) == 0) ++s.unknown_ends;
}

}  // namespace

extern "C" {

void kokkosp_init_library(int /*load_sequence*/, std::uint64_t interface_version, std::uint32_t /*devices*/,
                          void* /*device_info*/) {
  seen().interface_version = interface_version;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &seen().rank);
}

void kokkosp_finalize_library() {
  Seen& s = seen();
  int finalized = 1, initialized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  const char* report = std::getenv("KGPT_TOOL_REPORT");
  if (report == nullptr) return;
  const std::string path = std::string(report) + "." + std::to_string(s.rank < 0 ? 0 : s.rank);
  std::FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr) return;
  std::fprintf(out, "init %llu\n", static_cast<unsigned long long>(s.interface_version));
  for (const auto& [key, calls] : s.kernels) {
    std::fprintf(out, "kernel %s %lld %s\n", key.first.c_str(), calls, key.second.c_str());
  }
  for (const auto& [name, pushes] : s.regions) std::fprintf(out, "region %lld %s\n", pushes, name.c_str());
  std::fprintf(out,
               "finalize mpi_running=%d open_kernels=%zu unknown_ends=%lld region_depth=%lld unmatched_pops=%lld "
               "max_region_depth=%lld\n",
               initialized && !finalized ? 1 : 0, s.open_kernels.size(), s.unknown_ends, s.depth, s.unmatched_pops,
               s.max_depth);
  std::fclose(out);
}

void kokkosp_begin_parallel_for(const char* name, std::uint32_t /*device*/, std::uint64_t* id) { begin("for", name, id); }
void kokkosp_end_parallel_for(std::uint64_t id) { end(id); }
void kokkosp_begin_parallel_reduce(const char* name, std::uint32_t /*device*/, std::uint64_t* id) {
  begin("reduce", name, id);
}
void kokkosp_end_parallel_reduce(std::uint64_t id) { end(id); }
void kokkosp_begin_parallel_scan(const char* name, std::uint32_t /*device*/, std::uint64_t* id) {
  begin("scan", name, id);
}
void kokkosp_end_parallel_scan(std::uint64_t id) { end(id); }

void kokkosp_push_profile_region(const char* name) {
  Seen& s = seen();
  ++s.regions[name];
  if (++s.depth > s.max_depth) s.max_depth = s.depth;
}

void kokkosp_pop_profile_region() {
  Seen& s = seen();
  if (s.depth == 0) {
    ++s.unmatched_pops;
  } else {
    --s.depth;
  }
}

}  // extern "C"
