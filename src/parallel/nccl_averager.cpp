#include "parallel/nccl_averager.hpp"

#include <mpi.h>
#include <nccl.h>

#include <string>
#include <thread>
#include <type_traits>

#include "core/error.hpp"
#include "parallel/watchdog.hpp"
#include "parallel/world.hpp"

namespace kgpt::parallel {

namespace {

// main.cpp puts the failing rank's number in front of the message in multi-rank jobs.
Error failure_on_rank(const std::string& what) { return Error(ExitCode::failure, what); }

std::string nccl_text(ncclResult_t result, ncclComm_t comm) {
  std::string text = ncclGetErrorString(result);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  // The last error's details (which peer, which transport), where this NCCL keeps them.
  const char* detail = ncclGetLastError(comm);
  if (detail != nullptr && *detail != '\0') text += " (" + std::string(detail) + ")";
#else
  (void)comm;
#endif
  return text;
}

void check_nccl(ncclResult_t result, const char* call, ncclComm_t comm = nullptr) {
  if (result != ncclSuccess) throw failure_on_rank(std::string(call) + " failed: " + nccl_text(result, comm));
}

void check_cuda(cudaError_t result, const char* call) {
  if (result != cudaSuccess) throw failure_on_rank(std::string(call) + " failed: " + cudaGetErrorString(result));
}

template <class T>
constexpr ncclDataType_t nccl_type() {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value, "gradients are float or double");
  return std::is_same<T, float>::value ? ncclFloat : ncclDouble;
}

template <class T>
class NcclAverager final : public GradientAverager<T> {
 public:
  NcclAverager(const Vector<T>& grads, int world_size, AveragingSettings settings, cudaStream_t stream)
      : GradientAverager<T>(grads, world_size, settings), stream_(stream) {
    int devices = 0;
    const cudaError_t found = cudaGetDeviceCount(&devices);
    if (found != cudaSuccess || devices == 0) {
      throw failure_on_rank(std::string("NCCL gradient averaging needs a CUDA device: ") +
                            cudaGetErrorString(found != cudaSuccess ? found : cudaErrorNoDevice));
    }
    // ncclCommInitRank waits for world_size ranks: with any other count it would wait forever.
    const int rank = world().rank;
    if (world_size != world().size) {
      throw failure_on_rank("NCCL gradient averaging was asked for " + std::to_string(world_size) +
                            " ranks in an MPI world of " + std::to_string(world().size));
    }
    // Rank 0's id names its bootstrap endpoint; every rank joins the communicator through it.
    ncclUniqueId id{};
    if (rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    if (MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) {
      throw failure_on_rank("MPI_Bcast of the NCCL unique id failed");
    }
    ncclComm_t comm = nullptr;
    check_nccl(ncclCommInitRank(&comm, world_size, id, rank), "ncclCommInitRank");
    comm_ = comm;
    // The all-reduces run on a stream of their own, so that the backward of the earlier layers keeps
    // the GPU busy while the buckets of the later ones are averaged. Events order the two streams.
    check_cuda(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check_cuda(cudaEventCreateWithFlags(&grads_ready_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda(cudaEventCreateWithFlags(&averaged_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda(cudaEventCreateWithFlags(&finished_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    // The stall watchdog aborts the communicator before it ends the job (destroying one that hangs
    // can block for ever), and polls its asynchronous error state while this thread waits anywhere.
    abort_hook_ = on_abort([comm] { ncclCommAbort(comm); });
    error_check_ = health_check([comm]() -> std::string {
      ncclResult_t async = ncclSuccess;
      const ncclResult_t queried = ncclCommGetAsyncError(comm, &async);
      if (queried != ncclSuccess) async = queried;
      return async == ncclSuccess ? "" : "NCCL reported an asynchronous error: " + nccl_text(async, comm);
    });
  }

  ~NcclAverager() override {
    abort_hook_ = WatchdogHook();
    error_check_ = WatchdogHook();
    if (finished_ != nullptr) cudaEventDestroy(finished_);
    if (averaged_ != nullptr) cudaEventDestroy(averaged_);
    if (grads_ready_ != nullptr) cudaEventDestroy(grads_ready_);
    if (comm_stream_ != nullptr) cudaStreamDestroy(comm_stream_);
    if (comm_ == nullptr) return;
    // Unwinding with a collective still in flight: destroying would wait for peers that may never
    // come, so the communicator is aborted instead.
    if (in_flight_) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
  }

  NcclAverager(const NcclAverager&) = delete;
  NcclAverager& operator=(const NcclAverager&) = delete;

  double backward_scale_factor() const override { return 1.0; }  // ncclAvg divides by the world size
  const char* transport() const override { return "nccl"; }

 protected:
  void start(const ExecSpace& exec, T* data, std::size_t count, int root) override {
    check_stream(exec);
    // In place, on the averaging stream, after everything the backward has enqueued so far (the
    // kernels that wrote these gradients among it): an event, not a fence, so the host goes on.
    check_cuda(cudaEventRecord(grads_ready_, stream_), "cudaEventRecord (gradients ready)");
    check_cuda(cudaStreamWaitEvent(comm_stream_, grads_ready_, 0), "cudaStreamWaitEvent (gradients ready)");
    if (root < 0) {
      check_nccl(ncclAllReduce(data, data, count, nccl_type<T>(), ncclAvg, comm_, comm_stream_), "ncclAllReduce", comm_);
    } else {
      // The owner's elements become the average; the others' receive buffer is not touched.
      check_nccl(ncclReduce(data, data, count, nccl_type<T>(), ncclAvg, root, comm_, comm_stream_), "ncclReduce", comm_);
    }
    in_flight_ = true;
  }

  int gather(const ExecSpace& exec, const Vector<T>& values, const std::vector<OwnedSpan>& owners) override {
    check_stream(exec);
    // An all-gather of unequal spans: one in-place broadcast from each owner, as one group, on the
    // compute stream after the update that wrote them and before the next step's forward.
    in_flight_ = true;
    check_nccl(ncclGroupStart(), "ncclGroupStart", comm_);
    for (std::size_t r = 0; r < owners.size(); ++r) {
      T* span = values.data() + owners[r].begin;
      check_nccl(ncclBroadcast(span, span, owners[r].end - owners[r].begin, nccl_type<T>(), static_cast<int>(r), comm_,
                               stream_),
                 "ncclBroadcast", comm_);
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd", comm_);
    wait_for_stream(stream_, "the parameter all-gather");
    in_flight_ = false;
    return static_cast<int>(owners.size());
  }

  int combine_bytes(const ExecSpace& exec, unsigned char* data, std::size_t bytes) override {
    check_stream(exec);
    // NCCL has no bitwise or; the maximum of unsigned bytes is the same where all but one rank hold
    // zero, which is how the ranks fill the buffer.
    // On the compute stream, after the kernels that wrote the updates and before those that apply them.
    in_flight_ = true;
    check_nccl(ncclAllReduce(data, data, bytes, ncclUint8, ncclMax, comm_, stream_), "ncclAllReduce (Muon's updates)",
               comm_);
    wait_for_stream(stream_, "the exchange of Muon's updates");
    in_flight_ = false;
    return 1;
  }

  void sum_scalar(const ExecSpace& exec, double* value) override {
    check_stream(exec);
    in_flight_ = true;
    check_nccl(ncclAllReduce(value, value, 1, ncclDouble, ncclSum, comm_, stream_), "ncclAllReduce (a scalar)", comm_);
    wait_for_stream(stream_, "a scalar's sum over the ranks");
    in_flight_ = false;
  }

  void progress() override { check_async("NCCL gradient averaging failed"); }

  void wait(const ExecSpace&) override {
    if (!in_flight_) return;
    // The optimizer's kernels, enqueued on the compute stream next, start after the last all-reduce.
    check_cuda(cudaEventRecord(averaged_, comm_stream_), "cudaEventRecord (averaged)");
    check_cuda(cudaStreamWaitEvent(stream_, averaged_, 0), "cudaStreamWaitEvent (averaged)");
    poll(averaged_, "NCCL gradient averaging failed while waiting");
    in_flight_ = false;
  }

 private:
  void check_stream(const ExecSpace& exec) const {
#ifdef KOKKOS_ENABLE_CUDA
    // Ordering by stream alone holds only on the stream the gradients were written on.
    if (exec.cuda_stream() != stream_) {
      throw failure_on_rank("NCCL gradient averaging was given another CUDA stream than at its start");
    }
#else
    (void)exec;
#endif
  }

  // Returns once `stream`'s work so far is done.
  void wait_for_stream(cudaStream_t stream, const char* what) {
    check_cuda(cudaEventRecord(finished_, stream), "cudaEventRecord");
    poll(finished_, (std::string("NCCL failed during ") + what).c_str());
  }

  // Polling rather than cudaEventSynchronize: when a peer dies a collective never ends, and only an
  // error seen here (and ncclCommAbort) ends it.
  void poll(cudaEvent_t event, const char* what) {
    for (;;) {
      const cudaError_t state = cudaEventQuery(event);
      if (state == cudaSuccess) break;
      if (state != cudaErrorNotReady) check_cuda(state, "cudaEventQuery (waiting for NCCL)");
      check_async(what);
      std::this_thread::yield();
    }
  }

  // Throws, after aborting the communicator, when NCCL reports an error of a started collective.
  void check_async(const char* what) {
    if (comm_ == nullptr) throw failure_on_rank(std::string(what) + ": the NCCL communicator was aborted earlier");
    ncclResult_t async = ncclSuccess;
    const ncclResult_t queried = ncclCommGetAsyncError(comm_, &async);
    if (queried != ncclSuccess) async = queried;
    if (async == ncclSuccess) return;
    const std::string text = nccl_text(async, comm_);
    abort_hook_ = WatchdogHook();
    error_check_ = WatchdogHook();
    ncclCommAbort(comm_);
    comm_ = nullptr;
    in_flight_ = false;
    throw failure_on_rank(std::string(what) + " (ncclCommGetAsyncError): " + text + "; communicator aborted");
  }

  cudaStream_t stream_;             // the compute stream: the backward writes the gradients there
  cudaStream_t comm_stream_ = nullptr;  // the all-reduces run here
  cudaEvent_t grads_ready_ = nullptr, averaged_ = nullptr, finished_ = nullptr;
  ncclComm_t comm_ = nullptr;
  bool in_flight_ = false;  // a collective was started and nothing has seen it end yet
  WatchdogHook abort_hook_, error_check_;
};

}  // namespace

template <class T>
std::unique_ptr<GradientAverager<T>> make_nccl_averager(const Vector<T>& grads, int world_size,
                                                        AveragingSettings settings, cudaStream_t stream) {
  return std::make_unique<NcclAverager<T>>(grads, world_size, settings, stream);
}

template std::unique_ptr<GradientAverager<float>> make_nccl_averager(const Vector<float>&, int, AveragingSettings,
                                                                     cudaStream_t);
template std::unique_ptr<GradientAverager<double>> make_nccl_averager(const Vector<double>&, int, AveragingSettings,
                                                                      cudaStream_t);

}  // namespace kgpt::parallel
