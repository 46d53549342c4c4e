#pragma once
// Where a step's time goes, op by op (`kgpt bench --profile`). While profiling is on, every Kokkos
// kernel (by its label, "kgpt::rmsnorm::forward") and every explicit Region (GEMMs by shape and
// types, cuDNN attention, gradient averaging) is fenced before and after and its time added to a
// table under the phase it ran in (forward, backward, optimizer, ...). Kernels that run inside an
// explicit Region count towards that Region. A Region that knows its arithmetic (a product, an
// attention) adds it too, so the table gives that op's FLOP/s. Off, a Region costs a test of one
// flag, and a Kokkos Tools library (KOKKOS_TOOLS_LIBS) sees Phases and Regions as regions named
// "kgpt::<name>" ("kgpt::forward", "kgpt::attention (fused) forward").
// Fencing serialises the device: the table says where time goes, not how fast an unprofiled step is.

#include <string>
#include <utility>
#include <vector>

#include "core/views.hpp"

namespace kgpt::profile {

struct Entry {
  std::string phase, name;
  double seconds = 0;
  long long calls = 0;
  double flops = 0;  // the floating-point operations of its calls, where the op says (else 0)
};

// Whether enable(true) can work: no Kokkos Tools library holds the callbacks.
bool available();
// Starts or stops timing (and the kernel callbacks); starting clears the table. Throws when a
// Kokkos Tools library (KOKKOS_TOOLS_LIBS) is loaded: both would want the same callbacks.
void enable(bool on);
bool enabled();
// Whether a Region's name is read: profiling is on, or a Kokkos Tools library (KOKKOS_TOOLS_LIBS)
// holds Kokkos's callbacks and sees Regions as regions. Names that cost work to make (a product's
// shape) are made only then.
bool regions_named();
// The table so far, in the order entries first appeared.
std::vector<Entry> entries();

// Counts the bytes of Views allocated in MemSpace (the GPU on a CUDA build) from now on, with the
// library workspaces alive then and later (library_memory): live and the high-water mark, kgpt's
// own peak memory. What libraries allocate on their own (cuDNN's and cuBLASLt's handles, the CUDA
// context) is not in it. Returns false, counting nothing, when a Kokkos Tools library is loaded.
bool track_memory(bool on);
double peak_memory_bytes();
// This process's peak resident set on the host (getrusage), in bytes: everything it ever held in
// host memory at once, Views, libraries and the MPI runtime included.
double process_peak_resident_bytes();
// What made up that peak, by View label (the library workspaces as one entry), largest first.
std::vector<std::pair<std::string, double>> peak_memory_by_label();
// Device memory kgpt allocates outside Views for a library to use (the cuBLASLt and cuDNN
// workspaces): +bytes when allocated, -bytes when freed.
void library_memory(double bytes);
// Views of one byte or more allocated in any memory space since tracking started (a step should
// allocate none).
long long allocation_count();
// Those allocations by "space: label", with how many of each, in the order first seen.
std::vector<std::pair<std::string, long long>> allocations_by_label();

// The phase the work until the next Phase belongs to ("forward", "backward", "optimizer").
class Phase {
 public:
  explicit Phase(const char* name);
  ~Phase();
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;

 private:
  std::string previous_;
};

// Work that is not one Kokkos kernel: timed as one entry named `name` (made only when profiling),
// with the floating-point operations it does (0: not counted).
class Region {
 public:
  Region(const ExecSpace& exec, const char* name, double flops = 0);
  Region(const ExecSpace& exec, const std::string& name, double flops = 0);
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

 private:
  void start(const std::string& name, double flops);
  void push_for_tool(const std::string& name);
  const ExecSpace& exec_;
  bool active_ = false;
  bool pushed_for_tool_ = false;
};

}  // namespace kgpt::profile
