#pragma once
// The MPI world of a run (docs/design.md, sections 1, 7 and 9): who this rank is, and the few
// host collectives the trainer needs besides gradient averaging (agreement on stop decisions and
// errors, sums for the logged loss and for evaluation, the start-up broadcast and checksums).
// Every function here is a collective over MPI_COMM_WORLD unless it says otherwise.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace kgpt::parallel {

struct WorldInfo {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // rank among the ranks of this node (MPI_Comm_split_type, shared memory)
  int local_size = 1;
  // Every rank's node (MPI_Get_processor_name: its hostname) and local rank, indexed by rank.
  std::vector<std::string> hosts;
  std::vector<int> local_ranks;
};

// MPI for the life of the process: initialised before Kokkos, finalised after it (main owns one).
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

// This rank's place in MPI_COMM_WORLD; queried once, after MPI_Init.
const WorldInfo& world();

// "rank R (HOST)" where the job has more than one rank, for messages about another rank.
std::string rank_name(int rank);

// Where the ranks run, node by node in rank order, with their ranks and local ranks:
// "node1 ranks 0-7 local 0-7, node2 ranks 8-15 local 0-7". Not a collective (world() gathered it).
std::string placement();

// Under Slurm (SLURM_NTASKS set), "" when MPI's world size equals SLURM_NTASKS, else a message
// saying the launch is broken. Not a collective.
std::string slurm_world_mismatch(int world_size);

double sum(double value);
void sum_in_place(double* values, int count);
double max(double value);
bool any(bool flag);

// Broadcasts `bytes` bytes at `data` (host memory) from rank 0.
void broadcast_from_root(void* data, std::size_t bytes);

// Point to point, for work shared out by rank (kgpt prepare's encoded text): `values` to rank 0,
// and at rank 0 the next message of `rank`. Messages of one sender arrive in the order sent. The
// send does not wait for rank 0 to take the message (the sender goes on with its next share; the
// values are kept until sent); wait_for_sends_to_root() waits for all of them.
void send_ints_to_root(std::vector<int> values);
std::vector<int> receive_ints_from(int rank);
void wait_for_sends_to_root();

// MPI counts and displacements are ints: `values` as ints, or Error(failure) naming `what` when one
// exceeds INT_MAX.
std::vector<int> mpi_counts(const std::vector<std::size_t>& values, const char* what);

// Every rank's span of a float buffer gathered on rank 0 only: `mine` (counts[rank] floats) into data[begins[r]...] there.
void gather_spans_to_root(const float* mine, float* data, const std::vector<std::size_t>& begins,
                          const std::vector<std::size_t>& counts);

// Every rank's value, indexed by rank.
std::vector<std::uint64_t> gather_all(std::uint64_t value);

// A failure every rank knows about and agreed on, so all ranks end normally with `code()`; the
// message is printed where report_here() is true (one rank), nowhere else.
class AgreedFailure : public Error {
 public:
  AgreedFailure(ExitCode code, const std::string& message, bool report_here)
      : Error(code, message), report_here_(report_here) {}
  bool report_here() const { return report_here_; }

 private:
  bool report_here_;
};

// Runs `step` on every rank, then agrees: if it threw an Error on any rank, every rank throws
// AgreedFailure with the highest exit code, reported by the lowest failing rank (its message names
// the rank when that is not rank 0). Use it for work that may fail on some ranks and not others
// before the ranks meet in a collective (reading the deck and the data, making the run directory).
void agreed(const std::function<void()>& step);

// Ends every rank of the job with `code` (MPI_Abort); for a failure on one rank after start-up.
// This rank exits at most kAbortGraceSeconds later, even where MPI_Abort cannot reach the launcher.
constexpr int kAbortGraceSeconds = 3;
[[noreturn]] void abort_all(int code);

}  // namespace kgpt::parallel
