#include "model/parameters.hpp"

#include "core/error.hpp"
#include "core/random.hpp"

namespace kgpt::model {

const char* group_name(ParamGroup group) {
  switch (group) {
    case ParamGroup::matrix: return "matrix";
    case ParamGroup::scalar: return "scalar";
    case ParamGroup::embedding: return "embedding";
    case ParamGroup::head: return "head";
  }
  return "unknown";
}

const char* role_name(Role role) {
  switch (role) {
    case Role::embedding: return "embedding";
    case Role::head: return "head";
    case Role::attention: return "attention";
    case Role::mlp: return "mlp";
    case Role::projection: return "projection";
    case Role::control: return "control";
    case Role::norm: return "norm";
    case Role::bias: return "bias";
  }
  return "unknown";
}

ParamGroup group_of(Role role) {
  switch (role) {
    case Role::embedding: return ParamGroup::embedding;
    case Role::head: return ParamGroup::head;
    case Role::attention:
    case Role::mlp:
    case Role::projection: return ParamGroup::matrix;
    case Role::control:
    case Role::norm:
    case Role::bias: return ParamGroup::scalar;
  }
  return ParamGroup::scalar;
}

void ParameterLayout::add(TensorSpec spec) {
  if (contains(spec.name)) throw Error(ExitCode::failure, "parameter layout: tensor '" + spec.name + "' added twice");
  TensorEntry entry;
  entry.size = 1;
  for (std::size_t extent : spec.shape) entry.size *= extent;
  entry.offset = (buffer_size_ + kAlignment - 1) / kAlignment * kAlignment;
  entry.spec = std::move(spec);
  buffer_size_ = entry.offset + entry.size;
  entries_.push_back(std::move(entry));
}

bool ParameterLayout::contains(const std::string& name) const {
  for (const auto& entry : entries_) {
    if (entry.spec.name == name) return true;
  }
  return false;
}

std::pair<std::size_t, std::size_t> ParameterLayout::block_span(int block) const {
  std::size_t first = entries_.size(), last = 0;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].spec.block != block) continue;
    if (first == entries_.size()) first = i;
    else if (i != last + 1) {
      throw Error(ExitCode::failure, "parameter layout: the tensors of block " + std::to_string(block) + " are not consecutive");
    }
    last = i;
  }
  if (first == entries_.size()) throw Error(ExitCode::failure, "parameter layout: no tensor in block " + std::to_string(block));
  const std::size_t end = last + 1 < entries_.size() ? entries_[last + 1].offset : buffer_size_;
  return {entries_[first].offset, end};
}

std::pair<std::size_t, std::size_t> ParameterLayout::span_at(std::size_t offset) const {
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].offset != offset) continue;
    return {offset, i + 1 < entries_.size() ? entries_[i + 1].offset : buffer_size_};
  }
  throw Error(ExitCode::failure, "parameter layout: no tensor starts at element " + std::to_string(offset));
}

const TensorEntry& ParameterLayout::holding(std::size_t offset) const {
  for (const auto& entry : entries_) {
    if (offset >= entry.offset && offset < entry.offset + entry.size) return entry;
  }
  throw Error(ExitCode::failure, "parameter layout: element " + std::to_string(offset) + " lies in no tensor");
}

const TensorEntry& ParameterLayout::find(const std::string& name) const {
  for (const auto& entry : entries_) {
    if (entry.spec.name == name) return entry;
  }
  throw Error(ExitCode::failure, "parameter layout: no tensor named '" + name + "'");
}

std::size_t ParameterLayout::parameter_count() const {
  std::size_t count = 0;
  for (const auto& entry : entries_) count += entry.size;
  return count;
}

template <class T>
Vector<T> Parameters<T>::view1(const Vector<T>& buffer, const std::string& name) const {
  const TensorEntry& entry = layout_.find(name);
  if (entry.spec.shape.size() != 1) {
    throw Error(ExitCode::failure, "parameter '" + name + "' has rank " + std::to_string(entry.spec.shape.size()) + ", not 1");
  }
  return Vector<T>(buffer.data() + entry.offset, entry.size);
}

template <class T>
Matrix<T> Parameters<T>::view2(const Vector<T>& buffer, const std::string& name) const {
  const TensorEntry& entry = layout_.find(name);
  if (entry.spec.shape.size() != 2) {
    throw Error(ExitCode::failure, "parameter '" + name + "' has rank " + std::to_string(entry.spec.shape.size()) + ", not 2");
  }
  return Matrix<T>(buffer.data() + entry.offset, entry.spec.shape[0], entry.spec.shape[1]);
}

template <class T>
const TensorEntry& ViewBinder<T>::next(const TensorSpec& spec, std::size_t rank) {
  if (index_ >= layout_.entries().size() || layout_.entries()[index_].spec.name != spec.name ||
      spec.shape.size() != rank) {
    throw Error(ExitCode::failure, "parameter declaration: tensor '" + spec.name + "' (rank " +
                                       std::to_string(spec.shape.size()) + ") does not match the layout");
  }
  return layout_.entries()[index_++];
}

template <class T>
void ViewBinder<T>::operator()(Vector<T>& view, const TensorSpec& spec) {
  const TensorEntry& e = next(spec, 1);
  view = Vector<T>(buffer_.data() + e.offset, e.size);
}

template <class T>
void ViewBinder<T>::operator()(Matrix<T>& view, const TensorSpec& spec) {
  const TensorEntry& e = next(spec, 2);
  view = Matrix<T>(buffer_.data() + e.offset, e.spec.shape[0], e.spec.shape[1]);
}

template <class T>
void initialize(const Parameters<T>& params, std::uint64_t seed) {
  Kokkos::deep_copy(params.values(), T(0));  // alignment padding included
  const auto& entries = params.layout().entries();
  for (std::size_t index = 0; index < entries.size(); ++index) {
    const TensorEntry& entry = entries[index];
    Vector<T> tensor(params.values().data() + entry.offset, entry.size);
    const double a = entry.spec.a;
    switch (entry.spec.init) {
      case Init::zeros: break;
      case Init::constant: Kokkos::deep_copy(tensor, static_cast<T>(a)); break;
      case Init::normal: random::fill_normal(tensor, seed, index, a); break;
      case Init::uniform: random::fill_uniform(tensor, seed, index, -a, a); break;
      case Init::first_row: {
        const std::size_t row = entry.spec.shape.empty() ? entry.size : entry.size / entry.spec.shape[0];
        Kokkos::deep_copy(Kokkos::subview(tensor, std::make_pair(std::size_t(0), row)), static_cast<T>(a));
        break;
      }
    }
  }
  Kokkos::fence();
}

template <class T>
void zero_gradients(const ExecSpace& exec, const Parameters<T>& params) {
  Kokkos::deep_copy(exec, params.grads(), T(0));
}

template class ViewBinder<float>;
template class ViewBinder<double>;
template class ViewBinder<bf16>;
template class Parameters<float>;
template class Parameters<double>;
template void initialize(const Parameters<float>&, std::uint64_t);
template void initialize(const Parameters<double>&, std::uint64_t);
template void zero_gradients(const ExecSpace&, const Parameters<float>&);
template void zero_gradients(const ExecSpace&, const Parameters<double>&);

}  // namespace kgpt::model
