#pragma once
// An embedding sublayer: rows of a table gathered by index (tokens, or hashed pairs of them),
// projected to the width they are added at where the table is narrower. Golf's BigramHash and value
// embeddings are such tables, and every family's token embedding is one without a projection.
//   forward:  read = table[rows];  projected = read W^T (with a projection)
//   backward: d_read = d_projected W, dW += d_projected^T read;  d_table[rows] += d_read

#include <utility>

#include "core/views.hpp"
#include "model/ops/embedding.hpp"
#include "model/ops/linear.hpp"

namespace kgpt::model::layers {

template <class T, class A>
class TableEmbedding {
 public:
  TableEmbedding() = default;
  TableEmbedding(const Matrix<T>& table, const Matrix<T>& grad, ops::Linear<T, A> projection = {})
      : table_(table), grad_(grad), projection_(std::move(projection)) {}

  bool projects() const { return projection_.weight.extent(0) != 0; }
  std::size_t width() const { return table_.extent(1); }
  std::size_t out() const { return projects() ? projection_.out() : width(); }

  // read = table[rows]; with a projection, projected = read W^T (else projected is not touched).
  template <class Read, class Projected>
  void forward(const ExecSpace& exec, const ConstTokenMatrix& rows, const Read& read, const Projected& projected) const {
    ops::embedding_forward<T>(exec, rows, table_, read);
    if (projects()) ops::linear_forward(exec, projection_, read, projected);
  }
  // From the gradient of the output (projected, or read without a projection) into the table's
  // gradient; d_read is the read rows' gradient's scratch where there is a projection.
  template <class Read, class DProjected, class DRead>
  void backward(const ExecSpace& exec, const ConstTokenMatrix& rows, const Read& read, const DProjected& d_projected,
                const DRead& d_read, const ops::EmbeddingSortSpace<T>& space) const {
    if (!projects()) {
      ops::embedding_backward<T>(exec, rows, d_projected, grad_, space);
      return;
    }
    ops::linear_backward(exec, projection_, read, d_projected, d_read);
    ops::embedding_backward<T>(exec, rows, d_read, grad_, space);
  }

  ops::Linear<T, A>& projection() { return projection_; }

 private:
  Matrix<T> table_, grad_;
  ops::Linear<T, A> projection_;
};

}  // namespace kgpt::model::layers
