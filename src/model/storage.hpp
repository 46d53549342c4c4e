#pragma once
// Activation and workspace storage, declared like parameters and sized once for the largest
// micro-batch; each call views it with the shapes of the batch at hand, so nothing is allocated in
// the step loop and a forward may use any sequence length up to the capacity.
//
// A family declares its activations once, in a function template over a visitor, as it declares
// its parameters: declare(buffer, ActivationSpec{"x_mix", C}) names a Buffer member and its size,
// per token of the micro-batch (N x C elements) or fixed. ActivationAllocator allocates what a
// declaration names; ActivationCounter adds up its bytes without allocating (the family's
// activation_bytes, for a memory plan). A workspace handed to an op is a Workspace: a pointer with
// its size, checked by the op against what it needs.

#include <string>

#include "core/error.hpp"
#include "core/views.hpp"

namespace kgpt::model {

template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(const std::string& label, std::size_t capacity) : storage_(label, capacity) {}
  std::size_t capacity() const { return storage_.extent(0); }
  T* data() const { return storage_.data(); }
  std::string label() const { return storage_.label(); }
  Vector<T> vec(std::size_t n) const { return Vector<T>(check(n), n); }
  Matrix<T> mat(std::size_t rows, std::size_t cols) const { return Matrix<T>(check(rows * cols), rows, cols); }
  Tensor3<T> t3(std::size_t a, std::size_t b, std::size_t c) const { return Tensor3<T>(check(a * b * c), a, b, c); }
  Tensor4<T> t4(std::size_t a, std::size_t b, std::size_t c, std::size_t d) const {
    return Tensor4<T>(check(a * b * c * d), a, b, c, d);
  }

 private:
  T* check(std::size_t size) const {
    if (size > storage_.extent(0)) {
      throw Error(ExitCode::failure, "buffer " + storage_.label() + ": " + std::to_string(size) +
                                         " elements asked of a capacity of " + std::to_string(storage_.extent(0)));
    }
    return storage_.data();
  }
  Vector<T> storage_;
};

// Scratch memory an op borrows: where it starts and how many elements it holds. An op asks for
// what it needs with take(); more than the size is an Error naming the workspace and the op. An
// empty Workspace (the tests' way) makes the op allocate its own.
template <class T>
class Workspace {
 public:
  Workspace() = default;
  Workspace(T* data, std::size_t size, std::string name) : data_(data), size_(size), name_(std::move(name)) {}
  explicit Workspace(const Buffer<T>& buffer) : Workspace(buffer.data(), buffer.capacity(), buffer.label()) {}
  bool empty() const { return data_ == nullptr; }
  std::size_t size() const { return size_; }
  T* take(std::size_t elements, const char* who) const {
    if (elements > size_) {
      throw Error(ExitCode::failure, std::string(who) + ": needs " + std::to_string(elements) + " elements of workspace; " +
                                         name_ + " holds " + std::to_string(size_));
    }
    return data_;
  }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
  std::string name_;
};

// One declared buffer: `per_token` elements for each token of the micro-batch, or `fixed` elements.
struct ActivationSpec {
  std::string name;
  std::size_t per_token = 0;
  std::size_t fixed = 0;
  static ActivationSpec elements(std::string name, std::size_t count) { return ActivationSpec{std::move(name), 0, count}; }
  std::size_t size(std::size_t tokens) const { return per_token * tokens + fixed; }
};

// Allocates every buffer a declaration names, for micro-batches of up to `tokens` tokens.
class ActivationAllocator {
 public:
  ActivationAllocator(std::string prefix, std::size_t tokens) : prefix_(std::move(prefix)), tokens_(tokens) {}
  template <class T>
  void operator()(Buffer<T>& buffer, const ActivationSpec& spec) const {
    buffer = Buffer<T>(prefix_ + spec.name, spec.size(tokens_));
  }

 private:
  std::string prefix_;
  std::size_t tokens_;
};

// Adds up the bytes of every buffer a declaration names, allocating nothing.
class ActivationCounter {
 public:
  explicit ActivationCounter(std::size_t tokens) : tokens_(tokens) {}
  template <class T>
  void operator()(Buffer<T>&, const ActivationSpec& spec) {
    bytes_ += spec.size(tokens_) * sizeof(T);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  std::size_t tokens_;
  std::size_t bytes_ = 0;
};

// The model's own copy of a micro-batch's inputs and targets, sized for its capacity.
class TokenStage {
 public:
  TokenStage(int max_batch, int max_seq)
      : inputs_("kgpt::model::inputs", max_batch, max_seq), targets_("kgpt::model::targets", max_batch, max_seq) {}
  static std::size_t bytes(int max_batch, int max_seq) {
    return 2 * static_cast<std::size_t>(max_batch) * max_seq * sizeof(int);
  }

  // Copies a (B, T) micro-batch in; throws Error naming `who` when it exceeds the capacity or the
  // two shapes differ.
  void stage(const ExecSpace& exec, const ConstTokenMatrix& inputs, const ConstTokenMatrix& targets, const char* who) {
    const std::size_t b = inputs.extent(0), t = inputs.extent(1);
    if (b > inputs_.extent(0) || t > inputs_.extent(1) || targets.extent(0) != b || targets.extent(1) != t) {
      throw Error(ExitCode::failure, std::string(who) + ": micro-batch " + std::to_string(b) + "x" + std::to_string(t) +
                                         " does not fit the model's capacity " + std::to_string(inputs_.extent(0)) +
                                         "x" + std::to_string(inputs_.extent(1)));
    }
    batch_ = static_cast<int>(b);
    seq_ = static_cast<int>(t);
    Kokkos::deep_copy(exec, this->inputs(), inputs);
    Kokkos::deep_copy(exec, this->targets(), targets);
  }
  TokenMatrix inputs() const { return TokenMatrix(inputs_.data(), batch_, seq_); }
  TokenMatrix targets() const { return TokenMatrix(targets_.data(), batch_, seq_); }
  int batch() const { return batch_; }
  int seq() const { return seq_; }

 private:
  TokenMatrix inputs_, targets_;
  int batch_ = 0, seq_ = 0;
};

}  // namespace kgpt::model
