#pragma once
// Parameters live in one contiguous buffer with named, shaped Views into it, and gradients in a
// second buffer of the same layout, so the gradient average is one call over contiguous memory
// and checkpoints walk named tensors. A ParameterLayout lists the tensors; Parameters<T> owns
// the two buffers.
//
// Each model family declares its tensors once, in a function template over a visitor
// (declare_golf in families/golf/golf.hpp, ...): each call names a member View of the family's typed
// struct and gives the tensor's spec (name, shape, role, initialisation, block).
// LayoutBuilder turns a declaration into the layout; ViewBinder points the members of one struct at
// the values and of another at the gradients, so both share the declaration and forward and
// backward use members, never names.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.hpp"
#include "core/bf16.hpp"
#include "core/views.hpp"
#include "core/kernel.hpp"
#include "model/ops/launch.hpp"

namespace kgpt::model {

// Optimizer groups (docs/design.md, "Optimizers"): the block matrices (Muon or AdamW by
// optim.matrix_optimizer), the embeddings, an untied head, and vectors and scalars (Adam), each
// with its learning rate.
enum class ParamGroup { matrix, scalar, embedding, head };
const char* group_name(ParamGroup group);

// What a tensor is for, declared with it (docs/design.md, "Tensor roles"). Every rule that treats
// tensors differently reads the role, never the name: the optimizer group (so the learning rate,
// weight decay and matrix optimizer), the export's bits, what an artifact keeps in fp32, which
// products run FP8 and which matrices late QAT rounds.
enum class Role {
  embedding,   // token, position and bigram tables: group embedding; export.embed_bits
  head,        // an untied output head: group head; export.embed_bits
  attention,   // a block's attention matrices: group matrix; export.attention_bits; FP8 under model.fp8 all
  mlp,         // a block's MLP matrices: group matrix; export.mlp_bits; FP8 under model.fp8 all or mlp
  projection,  // any other matrix (BigramHash's projection): group matrix; 8 bits
  control,     // small tensors that steer the network (scales, gains, gates, mixes): group scalar; fp32 in artifacts
  norm,        // a norm's weight or bias: group scalar
  bias,        // a linear layer's bias: group scalar
};
const char* role_name(Role role);
ParamGroup group_of(Role role);
// Whether an artifact stores tensors of this role in fp32 when they are small enough to be kept
// unquantized (io/artifact.hpp), as parameter-golf keeps its control tensors.
inline bool kept_in_fp32(Role role) { return role == Role::control; }
// Whether a linear layer of this role runs FP8 products under model.fp8 (`mlp_only`: model.fp8 mlp).
inline bool runs_fp8(Role role, bool mlp_only) { return role == Role::mlp || (!mlp_only && role == Role::attention); }
// The block matrices late QAT rounds and the export groups by attention_bits and mlp_bits.
inline bool is_block_matrix(Role role) { return role == Role::attention || role == Role::mlp; }

enum class Init {
  zeros,
  constant,  // every element = a
  normal,    // N(0, a^2)
  uniform,   // U(-a, a)
  first_row,  // row 0 = a, other rows 0 (golf's resid_mix: weight 1 on x, 0 on x0)
};

struct TensorSpec {
  std::string name;
  std::vector<std::size_t> shape;
  Role role = Role::control;
  Init init = Init::zeros;
  double a = 0.0;
  int block = -1;  // the transformer block it belongs to, or -1: its gradients are final together
  ParamGroup group() const { return group_of(role); }
};

// A spec of block `block`'s tensors (their gradients are reported to averaging as one span).
inline TensorSpec in_block(TensorSpec spec, int block) {
  spec.block = block;
  return spec;
}

struct TensorEntry {
  TensorSpec spec;
  std::size_t offset = 0;  // elements from the start of the buffer
  std::size_t size = 0;    // product of the shape
};

class ParameterLayout {
 public:
  // Appends a tensor; offsets are aligned to kAlignment elements. Throws on a repeated name.
  void add(TensorSpec spec);
  const std::vector<TensorEntry>& entries() const { return entries_; }
  const TensorEntry& find(const std::string& name) const;  // throws Error naming the tensor
  bool contains(const std::string& name) const;
  // [begin, end) of the buffer covering the tensors of block `block` (consecutive in the
  // declaration), up to the next tensor's offset, so that the spans of consecutive groups touch.
  // Throws Error when no tensor is in the block or its tensors are not consecutive.
  std::pair<std::size_t, std::size_t> block_span(int block) const;
  // The same for the one tensor that starts at `offset`.
  std::pair<std::size_t, std::size_t> span_at(std::size_t offset) const;
  // The tensor whose elements hold buffer element `offset` (a View's first element, say); throws
  // Error when it falls in no tensor.
  const TensorEntry& holding(std::size_t offset) const;
  std::size_t buffer_size() const { return buffer_size_; }
  std::size_t parameter_count() const;  // sum of tensor sizes (without alignment padding)

  static constexpr std::size_t kAlignment = 16;  // 64 bytes of fp32

 private:
  std::vector<TensorEntry> entries_;
  std::size_t buffer_size_ = 0;
};

// Called by a backward with [begin, end) of the gradient buffer once those gradients are final for
// this micro-step (gradient averaging may start on them while the backward goes on).
using GradientsReady = std::function<void(std::size_t begin, std::size_t end)>;

template <class T>
class Parameters {
 public:
  explicit Parameters(ParameterLayout layout)
      : layout_(std::move(layout)),
        values_("kgpt::parameters", layout_.buffer_size()),
        grads_("kgpt::gradients", layout_.buffer_size()) {}

  const ParameterLayout& layout() const { return layout_; }
  const Vector<T>& values() const { return values_; }
  const Vector<T>& grads() const { return grads_; }

  // Views into the buffers by name; their shapes must match the tensor's rank.
  Vector<T> vector(const std::string& name) const { return view1(values_, name); }
  Matrix<T> matrix(const std::string& name) const { return view2(values_, name); }
  Vector<T> grad_vector(const std::string& name) const { return view1(grads_, name); }
  Matrix<T> grad_matrix(const std::string& name) const { return view2(grads_, name); }

 private:
  Vector<T> view1(const Vector<T>& buffer, const std::string& name) const;
  Matrix<T> view2(const Vector<T>& buffer, const std::string& name) const;

  ParameterLayout layout_;
  Vector<T> values_;
  Vector<T> grads_;
};

// [begin, end) of a buffer: the span of a group of tensors, as GradientsReady reports it.
using BufferSpan = std::pair<std::size_t, std::size_t>;

// Builds the layout of a declaration: declare(scratch, LayoutBuilder&) adds every tensor in order.
class LayoutBuilder {
 public:
  template <class View>
  void operator()(View&, TensorSpec spec) {
    layout.add(std::move(spec));
  }
  ParameterLayout layout;
};

// Points each declared View at its tensor in `buffer` (values or gradients), in declaration order,
// checking that the declaration matches the layout it was built with.
template <class T>
class ViewBinder {
 public:
  ViewBinder(const ParameterLayout& layout, const Vector<T>& buffer) : layout_(layout), buffer_(buffer) {}
  void operator()(Vector<T>& view, const TensorSpec& spec);
  void operator()(Matrix<T>& view, const TensorSpec& spec);

 private:
  const TensorEntry& next(const TensorSpec& spec, std::size_t rank);
  const ParameterLayout& layout_;
  Vector<T> buffer_;
  std::size_t index_ = 0;
};

// The layout of a family's declaration `declare(tensors, visitor)` for one configuration.
template <template <class> class Tensors, class Declare>
ParameterLayout layout_of(const Declare& declare) {
  Tensors<float> scratch;
  LayoutBuilder builder;
  declare(scratch, builder);
  return builder.layout;
}

// Fills every tensor by its Init rule from counter-based random numbers keyed by (seed, tensor
// index), so every rank and backend starts from the same values.
template <class T>
void initialize(const Parameters<T>& params, std::uint64_t seed);

namespace {  // kernels: internal linkage, see core/kernel.hpp

// shadow = values rounded to A (the weights the products of a bf16 model read). On a GPU (Packs)
// each thread rounds 8 values: two 16-byte loads of fp32, one 16-byte store of bf16.
template <class T, class A, bool Packs = backend::Traits::packed_elementwise>
void refresh_shadow(const ExecSpace& exec, const Vector<T>& values, const Vector<A>& shadow) {
  constexpr std::size_t W = 16 / sizeof(A);
  const std::size_t n = values.extent(0);
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  if (Packs && W * sizeof(T) % 16 == 0 && n % W == 0 && aligned(values.data()) && aligned(shadow.data())) {
    const T* const from = values.data();
    A* const to = shadow.data();
    kgpt::parallel_for(
        "kgpt::parameters::shadow", Kokkos::RangePolicy<ExecSpace>(exec, 0, n / W), KOKKOS_LAMBDA(const std::size_t p) {
          T v[W];
          model::ops::detail::load_values<W>(from + p * W, v);
          model::ops::detail::store_values<W>(to + p * W, v);
        });
    return;
  }
  kgpt::parallel_for(
      "kgpt::parameters::shadow", Kokkos::RangePolicy<ExecSpace>(exec, 0, n),
      KOKKOS_LAMBDA(const std::size_t i) { shadow(i) = static_cast<A>(values(i)); });
}

}  // namespace

// Sets every gradient to zero (before the first micro-step of an optimizer step).
template <class T>
void zero_gradients(const ExecSpace& exec, const Parameters<T>& params);

}  // namespace kgpt::model
