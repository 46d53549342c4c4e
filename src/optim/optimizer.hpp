#pragma once
// One optimizer step over every parameter tensor, by the group its declaration gives it
// (docs/design.md, "Optimizers"):
//   matrix:    Muon or AdamW (optim.matrix_optimizer; muon for golf, adamw for gpt2), matrix_lr
//   embedding: Adam(W), embed_lr;  head (untied): Adam(W), head_lr;  scalar: Adam, scalar_lr
// Decoupled weight decay acts by group, whatever the group's optimizer: optim.matrix_weight_decay,
// embed_weight_decay and head_weight_decay (each optim.weight_decay unless set) and
// scalar_weight_decay (0 unless set). Every learning rate is multiplied by the
// schedule's multiplier for the step. State is packed by kind: Adam moments for the tensors Adam
// updates, Muon momentum for the matrices Muon updates, each tensor at the parameter buffer's
// alignment, so no tensor holds state its optimizer never reads.

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "core/backend.hpp"
#include "core/views.hpp"
#include "model/parameters.hpp"
#include "optim/newton_schulz.hpp"
#include "optim/updates.hpp"

namespace kgpt::optim {

// The part of the parameter buffer one rank updates under parallel.zero_stage: 1: whole tensors
// [first_tensor, end_tensor) in layout order, and the buffer elements [begin, end) that hold them
// (with the alignment gaps after them), so that the shards of all ranks tile the buffer.
struct Shard {
  std::size_t first_tensor = 0, end_tensor = 0;
  std::size_t begin = 0, end = 0;
  std::size_t size() const { return end - begin; }
};
// The whole buffer: stage 0, or one rank.
Shard whole_layout(const model::ParameterLayout& layout);
// One shard per rank: contiguous runs of whole tensors, each as close to 1/ranks of the elements as
// whole tensors allow (a rank may get none when there are fewer tensors than ranks).
std::vector<Shard> shard_layout(const model::ParameterLayout& layout, int ranks);

// The state buffers an optimizer of this config keeps, by name, in the order checkpoints store them.
std::vector<std::string> state_names(const config::Config& config);

// Muon's orthogonalisation shared across ranks (parallel.share_muon at zero_stage 0): this rank and
// the number of ranks sharing it. One rank (the default) orthogonalises every matrix of its shard.
struct MuonSharing {
  int rank = 0, ranks = 1;
};

// Which of `ranks` ranks orthogonalises each tensor of the shard (indexed from shard.first_tensor),
// -1 for the tensors Muon does not update: whole matrices, balanced by their Newton-Schulz
// arithmetic (newton_schulz_flops): the costliest first, each to the rank with the least so far
// (ties to the lower tensor and the lower rank), the same on every rank. With `loads`, each rank's
// arithmetic is written there.
std::vector<int> muon_owners(const model::ParameterLayout& layout, const config::Config& config, const Shard& shard,
                             int ranks, std::vector<double>* loads = nullptr);

// Every rank's `bytes` at `data` (memory of exec's space, written by exec's earlier work) are
// combined before exec's later work reads them: where one rank wrote a value and the others zeros,
// every rank holds the value, bit for bit, whatever its type (GradientAverager::exchange_bytes).
using ExchangeBytes = std::function<void(const ExecSpace& exec, void* data, std::size_t bytes)>;

template <class T>
class Optimizer {
 public:
  // Updates and keeps state for `shard` of the parameters (the whole buffer by default). With
  // `sharing` over several ranks, this rank orthogonalises its share of the shard's Muon matrices
  // (muon_owners) and takes the others' results through the exchange (exchange_with) before it
  // applies every matrix's update; the momentum of every matrix is kept on every rank.
  Optimizer(const model::Parameters<T>& params, const config::Config& config);
  Optimizer(const model::Parameters<T>& params, const config::Config& config, const Shard& shard,
            const MuonSharing& sharing = {});
  // How the ranks sharing Muon exchange the orthogonalised updates (see ExchangeBytes); a step
  // under sharing over several ranks throws without one.
  void exchange_with(ExchangeBytes exchange) { exchange_ = std::move(exchange); }
  // This rank's part of the shard's Newton-Schulz arithmetic (1 without sharing; 0 without Muon).
  double muon_share() const { return muon_share_; }
  // `step` counts from 0. Every gradient is read times *grad_factor (a device scalar: the step's
  // clipping factor), or as it is when grad_factor is null. With norm_sq (a device scalar), the
  // squared global norm of the raw gradients is written there by the same passes. Waits for nothing.
  void step(const ExecSpace& exec, int step, double lr_multiplier, const double* grad_factor = nullptr,
            double* norm_sq = nullptr);
  double group_lr(model::ParamGroup group) const;
  double group_weight_decay(model::ParamGroup group) const;
  // Whether the tensors Adam updates go in one launch (adam_update_all), as on a GPU, or one launch
  // each, as on the host (where each is one vectorised loop); and whether that launch reads 16 bytes
  // per thread (a GPU's way). Tests run every arrangement.
  void fuse_adam(bool fused, bool packs = backend::Traits::packed_elementwise) {
    fused_adam_ = fused;
    packed_adam_ = packs;
    Kokkos::deep_copy(norm_parts_, 0.0);  // the norm's parts of one arrangement only
  }
  // Bytes of device memory the constructor allocates for parameters of this layout (the state and
  // the Newton-Schulz workspaces), allocating nothing: for the memory plan.
  static std::size_t state_bytes(const model::ParameterLayout& layout, const config::Config& config);
  static std::size_t state_bytes(const model::ParameterLayout& layout, const config::Config& config, const Shard& shard,
                                 const MuonSharing& sharing = {});
  // The state a checkpoint must hold, by name: adam_m, adam_v, and with Muon muon_momentum.
  std::vector<std::string> state_names() const;
  // One of them as the elements [shard().begin, shard().end) of a buffer with the parameter buffer's
  // layout, zero for the tensors that keep no such state (the checkpoint's form). Throws Error on an
  // unknown name or a span of the wrong size.
  std::vector<T> state_to_host(const std::string& name) const;
  void state_from_host(const std::string& name, const std::vector<T>& span);
  const Shard& shard() const { return shard_; }

 private:
  // Muon's matrices of one shape that this rank orthogonalises, together: the tensors (layout
  // indices) and, from `first_offset` in the offsets table, where each keeps its momentum (and its
  // orthogonalised update in the exchanged buffer, which has the momentum's layout).
  struct MuonBatch {
    std::size_t rows = 0, cols = 0, first_offset = 0;
    std::vector<std::size_t> tensors;
  };
  // The sizes of the constructor's buffers, in elements, and where each tensor of the shard keeps
  // its state: state_at[i - shard.first_tensor] in the moments or, for Muon's matrices, the momentum.
  struct Sizes {
    bool muon = false, bf16_muon = false;
    std::size_t moments = 0, momentum = 0, update = 0;
    std::size_t work_elements = 1, work_squares = 1, work_count = 1;
    std::size_t work16_elements = 1, work16_squares = 1, work16_count = 1;
    std::size_t exchange = 0, exchange16 = 0;  // the orthogonalised updates (T, or bf16 in bf16 models)
    std::size_t tensors = 0;
    std::vector<std::size_t> state_at;
    std::vector<AdamSegment> adam_segments;  // the tensors Adam updates, for adam_update_all
    std::size_t adam_chunks = 0;
    std::vector<MuonSegment> muon_segments;  // the matrices Muon updates, for muon_apply_all
    std::size_t muon_chunks = 0;
    std::vector<MuonBatch> batches;
    std::vector<std::size_t> batch_offsets, batch_params;  // each batch item's momentum and parameters
    std::vector<int> owners;
    double muon_share = 0;
  };
  static Sizes sizes(const model::ParameterLayout& layout, const config::Config& config, const Shard& shard,
                     const MuonSharing& sharing);
  Optimizer(const model::Parameters<T>& params, const config::Config& config, const Shard& shard,
            const MuonSharing& sharing, const Sizes& sizes);
  // Whether Muon updates the tensor (with momentum) rather than Adam (with two moments).
  static bool updated_by_muon(bool muon, const model::TensorEntry& e) {
    return muon && e.spec.group() == model::ParamGroup::matrix;
  }
  bool uses_muon(const model::TensorEntry& e) const { return updated_by_muon(muon_, e); }
  // Muon's part of a step: momentum, Newton-Schulz by batch, the exchange, the updates applied.
  template <class X>
  void muon_step(const ExecSpace& exec, double lr, double mu, const double* grad_factor, double* norm_sq,
                 NewtonSchulzWorkspace<X>& work, const Vector<X>& exchanged);
  const Vector<T>& state_buffer(const std::string& name) const;  // throws Error on an unknown name
  // Where each tensor keeping the state `name` has it: in the packed buffer, in the checkpoint's
  // span of the shard, and how many elements.
  struct Placement {
    std::ptrdiff_t packed, span, size;
  };
  std::vector<Placement> placements(const std::string& name) const;

  const model::Parameters<T>& params_;
  Shard shard_;
  MuonSharing sharing_;
  config::OptimConfig optim_;
  bool muon_;       // Muon for the matrices (else AdamW)
  bool bf16_muon_;  // Newton-Schulz in bf16, as the model's products (train.precision: bf16)
  std::vector<std::size_t> state_at_;
  std::vector<int> owners_;  // muon_owners of the shard
  std::vector<MuonBatch> batches_;
  double muon_share_ = 0;
  Vector<T> m_, v_, momentum_, update_;
  NewtonSchulzWorkspace<T> work_;
  NewtonSchulzWorkspace<bf16> work16_;
  Vector<T> exchange_buffer_;
  Vector<bf16> exchange16_buffer_;
  Kokkos::View<std::size_t*, MemSpace> batch_offsets_, batch_params_;
  Kokkos::View<MuonSegment*, MemSpace> muon_segments_;
  std::size_t muon_chunks_ = 0;
  ExchangeBytes exchange_;
  Kokkos::View<double*, MemSpace> norm_parts_;  // one per tensor, added in tensor order; then adam_update_all's
  Kokkos::View<AdamSegment*, MemSpace> adam_segments_;
  std::size_t adam_chunks_ = 0;
  bool fused_adam_ = backend::Traits::fused_adam;
  bool packed_adam_ = backend::Traits::packed_elementwise;
};

// The squared L2 norm of grads[begin, end) into norm_sq (a device scalar; nothing waits for it).
template <class T>
void gradient_norm_squared(const ExecSpace& exec, const Vector<T>& grads, std::size_t begin, std::size_t end,
                           const Kokkos::View<double, MemSpace>& norm_sq);

// The clipping factor from the global squared norm: max_norm / (norm + 1e-6) when max_norm > 0 and
// the norm exceeds it, else 1 (device scalars; nothing waits for them).
template <class T>
void clip_factor(const ExecSpace& exec, double max_norm, const Kokkos::View<double, MemSpace>& norm_sq,
                 const Kokkos::View<double, MemSpace>& factor);

}  // namespace kgpt::optim
