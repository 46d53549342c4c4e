#include "parallel/world.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>

#include "core/error.hpp"

namespace kgpt::parallel {

namespace {

void check(int code, const char* what) {
  if (code != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    throw Error(ExitCode::failure, std::string(what) + " failed: " + std::string(text, length));
  }
}

WorldInfo query_world() {
  WorldInfo info;
  check(MPI_Comm_rank(MPI_COMM_WORLD, &info.rank), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &info.size), "MPI_Comm_size");
  MPI_Comm node;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, info.rank, MPI_INFO_NULL, &node),
        "MPI_Comm_split_type");
  MPI_Comm_rank(node, &info.local_rank);
  MPI_Comm_size(node, &info.local_size);
  MPI_Comm_free(&node);
  // Every rank's node and local rank, for the log and for messages that name another rank.
  struct Place {
    char host[MPI_MAX_PROCESSOR_NAME];
    int local_rank;
  };
  Place mine{};
  int length = 0;
  check(MPI_Get_processor_name(mine.host, &length), "MPI_Get_processor_name");
  mine.local_rank = info.local_rank;
  std::vector<Place> all(static_cast<std::size_t>(info.size));
  check(MPI_Allgather(&mine, sizeof(Place), MPI_BYTE, all.data(), sizeof(Place), MPI_BYTE, MPI_COMM_WORLD),
        "MPI_Allgather");
  for (const Place& p : all) {
    info.hosts.emplace_back(p.host, ::strnlen(p.host, sizeof(p.host)));
    info.local_ranks.push_back(p.local_rank);
  }
  return info;
}

// "3", "0-7" or "0,2,5": a sorted list of numbers, runs as ranges.
std::string number_ranges(const std::vector<int>& numbers) {
  std::string out;
  for (std::size_t i = 0; i < numbers.size();) {
    std::size_t j = i;
    while (j + 1 < numbers.size() && numbers[j + 1] == numbers[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(numbers[i]) + (j > i ? "-" + std::to_string(numbers[j]) : "");
    i = j + 1;
  }
  return out;
}

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  // The stall watchdog's thread trades heartbeats while the main thread is inside a collective.
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  // Errors come back as codes and become exceptions with a message, rather than aborting silently.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

const WorldInfo& world() {
  static const WorldInfo info = query_world();
  return info;
}

std::string rank_name(int rank) {
  const WorldInfo& w = world();
  const std::string name = "rank " + std::to_string(rank);
  if (w.size <= 1 || rank < 0 || rank >= static_cast<int>(w.hosts.size())) return name;
  return name + " (" + w.hosts[static_cast<std::size_t>(rank)] + ")";
}

std::string placement() {
  const WorldInfo& w = world();
  std::vector<std::string> order;  // nodes in the order of their first rank
  for (const std::string& host : w.hosts) {
    if (std::find(order.begin(), order.end(), host) == order.end()) order.push_back(host);
  }
  std::string out;
  for (const std::string& host : order) {
    std::vector<int> ranks, locals;
    for (int r = 0; r < w.size; ++r) {
      if (w.hosts[static_cast<std::size_t>(r)] != host) continue;
      ranks.push_back(r);
      locals.push_back(w.local_ranks[static_cast<std::size_t>(r)]);
    }
    std::sort(locals.begin(), locals.end());
    out += (out.empty() ? "" : ", ") + host + " ranks " + number_ranges(ranks) + " local " + number_ranges(locals);
  }
  return out;
}

std::string slurm_world_mismatch(int world_size) {
  const char* tasks = std::getenv("SLURM_NTASKS");
  if (tasks == nullptr || *tasks == '\0') return "";
  char* end = nullptr;
  const long ntasks = std::strtol(tasks, &end, 10);
  if (*end != '\0' || ntasks == world_size) return "";
  return "MPI world size is " + std::to_string(world_size) + " but SLURM_NTASKS is " + tasks +
         ": the ranks were not started as one MPI job (launch with srun --mpi=pmix, or mpiexec with as many "
         "ranks as the allocation has tasks)";
}

double sum(double value) {
  double result = 0;
  check(MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  return result;
}

void sum_in_place(double* values, int count) {
  check(MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
}

double max(double value) {
  double result = 0;
  check(MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return result;
}

bool any(bool flag) {
  int local = flag ? 1 : 0, result = 0;
  check(MPI_Allreduce(&local, &result, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return result != 0;
}

void broadcast_from_root(void* data, std::size_t bytes) {
  auto* at = static_cast<char*>(data);
  while (bytes > 0) {
    const int chunk = static_cast<int>(bytes < std::size_t(INT_MAX) ? bytes : std::size_t(INT_MAX));
    check(MPI_Bcast(at, chunk, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
    at += chunk;
    bytes -= static_cast<std::size_t>(chunk);
  }
}

namespace {

struct PendingSend {
  MPI_Request request;
  std::vector<int> values;
};

std::deque<PendingSend>& pending_sends() {
  static std::deque<PendingSend> pending;
  return pending;
}

}  // namespace

void send_ints_to_root(std::vector<int> values) {
  if (values.size() > std::size_t(INT_MAX)) throw Error(ExitCode::failure, "send_ints_to_root: a message over INT_MAX ints");
  auto& pending = pending_sends();
  // Sent ones leave the front, so the buffers kept are only those rank 0 has not taken yet.
  while (!pending.empty()) {
    int done = 0;
    check(MPI_Test(&pending.front().request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (!done) break;
    pending.pop_front();
  }
  pending.push_back({MPI_REQUEST_NULL, std::move(values)});
  PendingSend& send = pending.back();
  check(MPI_Isend(send.values.data(), static_cast<int>(send.values.size()), MPI_INT, 0, 0, MPI_COMM_WORLD, &send.request),
        "MPI_Isend");
}

void wait_for_sends_to_root() {
  auto& pending = pending_sends();
  for (PendingSend& send : pending) check(MPI_Wait(&send.request, MPI_STATUS_IGNORE), "MPI_Wait");
  pending.clear();
}

std::vector<int> receive_ints_from(int rank) {
  MPI_Status status;
  check(MPI_Probe(rank, 0, MPI_COMM_WORLD, &status), "MPI_Probe");
  int count = 0;
  check(MPI_Get_count(&status, MPI_INT, &count), "MPI_Get_count");
  std::vector<int> values(static_cast<std::size_t>(count));
  check(MPI_Recv(values.data(), count, MPI_INT, rank, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
  return values;
}

std::vector<int> mpi_counts(const std::vector<std::size_t>& values, const char* what) {
  std::vector<int> out;
  for (const std::size_t v : values) {
    if (v > static_cast<std::size_t>(INT_MAX)) {
      throw Error(ExitCode::failure, std::string(what) + ": " + std::to_string(v) + " elements exceed MPI's int counts");
    }
    out.push_back(static_cast<int>(v));
  }
  return out;
}

void gather_spans_to_root(const float* mine, float* data, const std::vector<std::size_t>& begins,
                          const std::vector<std::size_t>& counts) {
  const std::vector<int> displs = mpi_counts(begins, "gathering state spans"),
                         sizes = mpi_counts(counts, "gathering state spans");
  const int rank = world().rank;
  check(MPI_Gatherv(mine, sizes[static_cast<std::size_t>(rank)], MPI_FLOAT, data, sizes.data(), displs.data(), MPI_FLOAT, 0,
                    MPI_COMM_WORLD),
        "MPI_Gatherv");
}

std::vector<std::uint64_t> gather_all(std::uint64_t value) {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(world().size));
  check(MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD), "MPI_Allgather");
  return all;
}

void agreed(const std::function<void()>& step) {
  int code = 0;
  std::string message;
  try {
    step();
  } catch (const Error& e) {
    code = static_cast<int>(e.code());
    message = e.what();
  }
  if (world().size == 1) {
    if (code != 0) throw AgreedFailure(static_cast<ExitCode>(code), message, true);
    return;
  }
  const auto codes = gather_all(static_cast<std::uint64_t>(code));
  int worst = 0, first_failing = -1;
  for (int r = 0; r < static_cast<int>(codes.size()); ++r) {
    if (codes[r] == 0) continue;
    worst = std::max(worst, static_cast<int>(codes[r]));
    if (first_failing < 0) first_failing = r;
  }
  if (worst == 0) return;
  const int rank = world().rank;
  if (rank != first_failing) throw AgreedFailure(static_cast<ExitCode>(worst), "", false);
  throw AgreedFailure(static_cast<ExitCode>(worst), rank == 0 ? message : rank_name(rank) + ": " + message, true);
}

void abort_all(int code) {
  // MPI_Abort asks the launcher to end the other ranks, and can wait for ever on one it cannot
  // reach (a node cut off from srun): this rank ends after a grace period whatever MPI does.
  std::thread([code] {
    std::this_thread::sleep_for(std::chrono::seconds(kAbortGraceSeconds));
    std::_Exit(code);
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace kgpt::parallel
