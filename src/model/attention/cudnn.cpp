#include "model/attention/cudnn.hpp"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <tuple>
#include <unordered_map>

#include "core/error.hpp"
#include "core/profile.hpp"

namespace kgpt::model {

namespace fe = cudnn_frontend;

namespace {

enum Uid : std::int64_t { q_uid = 1, k_uid, v_uid, o_uid, stats_uid, do_uid, dq_uid, dk_uid, dv_uid };

void check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) {
    throw Error(ExitCode::failure, std::string("cuDNN: ") + what + ": " + cudnnGetErrorString(status));
  }
}

void check(fe::error_t status, const char* what) {
  if (!status.is_good()) throw Error(ExitCode::failure, std::string("cuDNN attention: ") + what + ": " + status.get_message());
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw Error(ExitCode::failure, std::string("CUDA: ") + what + ": " + cudaGetErrorString(status));
}

// One handle per process, kept until exit (Kokkos finalises the device before static destructors).
cudnnHandle_t handle() {
  static cudnnHandle_t made = [] {
    cudnnHandle_t h = nullptr;
    check(cudnnCreate(&h), "cudnnCreate");
    return h;
  }();
  return made;
}

std::vector<std::int64_t> dims(const Heads<const bf16>& x) { return {x.batch, x.heads, x.seq, x.dim}; }
std::vector<std::int64_t> strides(const Heads<const bf16>& x) { return {x.stride_b, x.stride_h, x.stride_t, 1}; }

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, Uid uid,
                                                    const Heads<const bf16>& x) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims(x)).set_stride(strides(x)));
}

void finish(fe::graph::Graph& g, const char* what) {
  check(g.validate(), what);
  check(g.build_operation_graph(handle()), what);
  check(g.create_execution_plans({fe::HeurMode_t::A}), what);
  check(g.check_support(handle()), what);
  check(g.build_plans(handle()), what);
}

fe::graph::Graph* new_graph() {
  auto* g = new fe::graph::Graph();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// The key of a graph: the shapes and strides of every tensor it reads and writes.
using Key = std::vector<std::int64_t>;

void append(Key& key, const Heads<const bf16>& x) {
  const auto d = dims(x), s = strides(x);
  key.insert(key.end(), d.begin(), d.end());
  key.insert(key.end(), s.begin(), s.end());
}

}  // namespace

struct CudnnAttention::Graphs {
  std::map<Key, std::unique_ptr<fe::graph::Graph>> forward, backward;
  void* workspace = nullptr;
  std::int64_t workspace_bytes = 0;

  // Makes room for a graph's workspace (when a graph is built, never while training runs).
  void reserve(const fe::graph::Graph& g) {
    std::int64_t bytes = 0;
    check(g.get_workspace_size(bytes), "workspace size");
    if (bytes <= workspace_bytes) return;
    if (workspace != nullptr) check(cudaFree(workspace), "cudaFree of the cuDNN workspace");
    profile::library_memory(-static_cast<double>(workspace_bytes));
    workspace = nullptr;
    workspace_bytes = 0;
    check(cudaMalloc(&workspace, static_cast<std::size_t>(bytes)), "cudaMalloc of the cuDNN workspace");
    workspace_bytes = bytes;
    profile::library_memory(static_cast<double>(bytes));
  }

  ~Graphs() {
    if (workspace != nullptr) cudaFree(workspace);
    profile::library_memory(-static_cast<double>(workspace_bytes));
  }
};

CudnnAttention::CudnnAttention(const AttentionShape& shape, const std::string& prefix)
    : graphs_(new Graphs()), deterministic_(shape.deterministic) {
  const config::AttentionCapability& can = config::attention_capability(config::Attention::cudnn);
  if (!can.head_dim(shape.head_dim)) {
    throw Error(ExitCode::failure, "cudnn attention: head dimension " + std::to_string(shape.head_dim) + " is not " +
                                       can.head_dims + " (use model.attention: gemm)");
  }
  const std::size_t rows = static_cast<std::size_t>(shape.max_batch) * shape.heads * shape.max_seq;
  for (int l = 0; l < shape.layers; ++l) stats_.emplace_back(prefix + "attention_stats", rows);
  handle();
}

CudnnAttention::~CudnnAttention() = default;

std::size_t CudnnAttention::workspace_bytes() const { return static_cast<std::size_t>(graphs_->workspace_bytes); }

void CudnnAttention::forward(const ExecSpace& exec, int layer, const Heads<const bf16>& q, const Heads<const bf16>& k,
                             const Heads<const bf16>& v, const Heads<bf16>& o) {
  const profile::Region region(exec, "attention (cudnn) forward", attention_flops(q, false));
  const Heads<const bf16> out = o;
  Key key;
  for (const auto* x : {&q, &k, &v, &out}) append(key, *x);
  auto& slot = graphs_->forward[key];
  if (!slot) {
    std::unique_ptr<fe::graph::Graph> g(new_graph());
    const auto Q = input(*g, "Q", q_uid, q), K = input(*g, "K", k_uid, k), V = input(*g, "V", v_uid, v);
    auto options = fe::graph::SDPA_attributes()
                       .set_name("kgpt_attention_forward")
                       .set_generate_stats(true)
                       .set_causal_mask(true)
                       .set_attn_scale(1.0f / std::sqrt(static_cast<float>(q.dim)));
    auto [O, stats] = g->sdpa(Q, K, V, options);
    O->set_output(true).set_uid(o_uid).set_dim(dims(out)).set_stride(strides(out));
    stats->set_output(true)
        .set_uid(stats_uid)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({q.batch, q.heads, q.seq, 1})
        .set_stride({static_cast<std::int64_t>(q.heads) * q.seq, q.seq, 1, 1});
    finish(*g, "building the forward graph");
    graphs_->reserve(*g);
    slot = std::move(g);
  }
  check(cudnnSetStream(handle(), exec.cuda_stream()), "cudnnSetStream");
  std::unordered_map<std::int64_t, void*> pack = {
      {q_uid, const_cast<bf16*>(q.data)},
      {k_uid, const_cast<bf16*>(k.data)},
      {v_uid, const_cast<bf16*>(v.data)},
      {o_uid, o.data},
      {stats_uid, stats_.at(static_cast<std::size_t>(layer)).vec(static_cast<std::size_t>(q.batch) * q.heads * q.seq).data()}};
  check(slot->execute(handle(), pack, graphs_->workspace), "running the forward graph");
}

void CudnnAttention::backward(const ExecSpace& exec, int layer, const Heads<const bf16>& q, const Heads<const bf16>& k,
                              const Heads<const bf16>& v, const Heads<const bf16>& o, const Heads<const bf16>& d_o,
                              const Heads<bf16>& dq, const Heads<bf16>& dk, const Heads<bf16>& dv) {
  const profile::Region region(exec, "attention (cudnn) backward", attention_flops(q, true));
  const Heads<const bf16> gq = dq, gk = dk, gv = dv;
  Key key;
  for (const auto* x : {&q, &k, &v, &o, &d_o, &gq, &gk, &gv}) append(key, *x);
  auto& slot = graphs_->backward[key];
  if (!slot) {
    std::unique_ptr<fe::graph::Graph> g(new_graph());
    const auto Q = input(*g, "Q", q_uid, q), K = input(*g, "K", k_uid, k), V = input(*g, "V", v_uid, v);
    const auto O = input(*g, "O", o_uid, o), dO = input(*g, "dO", do_uid, d_o);
    const auto stats = g->tensor(fe::graph::Tensor_attributes()
                                     .set_name("stats")
                                     .set_uid(stats_uid)
                                     .set_dim({q.batch, q.heads, q.seq, 1})
                                     .set_stride({static_cast<std::int64_t>(q.heads) * q.seq, q.seq, 1, 1})
                                     .set_data_type(fe::DataType_t::FLOAT));
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("kgpt_attention_backward")
                       .set_causal_mask(true)
                       .set_deterministic_algorithm(deterministic_)
                       .set_attn_scale(1.0f / std::sqrt(static_cast<float>(q.dim)));
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, options);
    dQ->set_output(true).set_uid(dq_uid).set_dim(dims(gq)).set_stride(strides(gq));
    dK->set_output(true).set_uid(dk_uid).set_dim(dims(gk)).set_stride(strides(gk));
    dV->set_output(true).set_uid(dv_uid).set_dim(dims(gv)).set_stride(strides(gv));
    finish(*g, "building the backward graph");
    graphs_->reserve(*g);
    slot = std::move(g);
  }
  check(cudnnSetStream(handle(), exec.cuda_stream()), "cudnnSetStream");
  std::unordered_map<std::int64_t, void*> pack = {
      {q_uid, const_cast<bf16*>(q.data)},
      {k_uid, const_cast<bf16*>(k.data)},
      {v_uid, const_cast<bf16*>(v.data)},
      {o_uid, const_cast<bf16*>(o.data)},
      {do_uid, const_cast<bf16*>(d_o.data)},
      {stats_uid, stats_.at(static_cast<std::size_t>(layer)).vec(static_cast<std::size_t>(q.batch) * q.heads * q.seq).data()},
      {dq_uid, dq.data},
      {dk_uid, dk.data},
      {dv_uid, dv.data}};
  check(slot->execute(handle(), pack, graphs_->workspace), "running the backward graph");
}

}  // namespace kgpt::model
