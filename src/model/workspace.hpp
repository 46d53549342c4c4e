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
  Vector<T> vec(std::size_t n) const { return Vector<T>(check(n), n); }
  Matrix<T> mat(std::size_t rows, std::size_t cols) const { return Matrix<T>(check(rows * cols), rows, cols); }
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

}  // namespace kgpt::model
