#pragma once
// Several linear layers that read the same input and write column blocks of one output, in order:
// q, k and v; an MLP's gate and up; or a single layer. Where their weights lie back to back in the
// parameter buffers (the layout's alignment can leave gaps in small models) they run as one Linear
// over the stacked weights, one product instead of several.
//   forward:  y[:, block i] = x W_i^T (+ b_i)
//   backward: dx = sum_i dy[:, block i] W_i (overwritten, or added);  dW_i += dy_i^T x

#include <utility>
#include <vector>

#include "core/views.hpp"
#include "model/ops/linear.hpp"

namespace kgpt::model::layers {

template <class T, class A>
class Projection {
 public:
  Projection() = default;
  // One layer, with or without a bias.
  explicit Projection(ops::Linear<T, A> single) { pieces_.push_back(std::move(single)); }
  // The layers of these weights, in output order: one stacked layer where each weight starts where
  // the one before ends, else one each.
  Projection(const std::vector<const Matrix<A>*>& weights, const std::vector<const Matrix<T>*>& grads) {
    bool stacked = true;
    std::size_t rows = 0;
    for (std::size_t i = 0; i < weights.size(); ++i) {
      if (i > 0 && (weights[i]->data() != weights[i - 1]->data() + weights[i - 1]->size() ||
                    grads[i]->data() != grads[i - 1]->data() + grads[i - 1]->size())) {
        stacked = false;
      }
      rows += weights[i]->extent(0);
    }
    if (stacked) {
      pieces_.push_back(ops::Linear<T, A>::stacked(*weights[0], *grads[0], rows));
    } else {
      for (std::size_t i = 0; i < weights.size(); ++i) pieces_.emplace_back(*weights[i], *grads[i]);
    }
  }

  template <class X, class Y>
  void forward(const ExecSpace& exec, const X& x, const Y& y) const {
    if (pieces_.size() == 1) {
      ops::linear_forward(exec, pieces_[0], x, y);
      return;
    }
    std::size_t begin = 0;
    for (const auto& piece : pieces_) {
      ops::linear_forward(exec, piece, x, columns(y, begin, begin + piece.out()));
      begin += piece.out();
    }
  }
  // The first piece writes dx (or adds to it, with accumulate_dx); the others add.
  template <class X, class DY, class DX>
  void backward(const ExecSpace& exec, const X& x, const DY& dy, const DX& dx, bool accumulate_dx = false,
                const Workspace<T>& partials = {}) const {
    if (pieces_.size() == 1) {
      ops::linear_backward(exec, pieces_[0], x, dy, dx, accumulate_dx, partials);
      return;
    }
    std::size_t begin = 0;
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
      ops::linear_backward(exec, pieces_[i], x, columns(dy, begin, begin + pieces_[i].out()), dx,
                           accumulate_dx || i > 0, partials);
      begin += pieces_[i].out();
    }
  }

  // The layers as they run, for the model's FP8 operands (ModelBase::use_fp8).
  std::vector<ops::Linear<T, A>>& pieces() { return pieces_; }
  const ops::Linear<T, A>& only() const { return pieces_.front(); }
  std::size_t count() const { return pieces_.size(); }

 private:
  template <class View>
  static auto columns(const View& m, std::size_t begin, std::size_t end) {
    return Kokkos::subview(m, Kokkos::ALL(), std::make_pair(begin, end));
  }
  std::vector<ops::Linear<T, A>> pieces_;
};

}  // namespace kgpt::model::layers
