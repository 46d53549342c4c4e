#pragma once
// Activation and gradient storage sized once for the largest micro-batch; each call views it with
// the shapes of the batch at hand, so nothing is allocated in the step loop and a forward may use
// any sequence length up to the capacity.

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

// The model's own copy of a micro-batch's inputs and targets, sized for its capacity.
class TokenStage {
 public:
  TokenStage(int max_batch, int max_seq)
      : inputs_("kgpt::model::inputs", max_batch, max_seq), targets_("kgpt::model::targets", max_batch, max_seq) {}

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
