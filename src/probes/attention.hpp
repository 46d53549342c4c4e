#pragma once
// Whether this machine runs a deck's attention: `kgpt check DECK --device` builds the attention the
// deck resolves to (cuDNN's graphs included) at the deck's micro-batch shape, runs its forward and
// backward once on random inputs laid out as the models lay them out (Q, K and V as column blocks
// of one token-major matrix), times a second run, and on one sequence compares the output and every
// gradient with another implementation of the same function (gemm, or fused where gemm is the one
// probed) on the same inputs. A runtime cuDNN that cannot build or run the graphs fails here, with
// its message, before a job waits in a queue for it.

#include <string>

#include "config/config.hpp"

namespace kgpt::probes {

struct AttentionProbe {
  std::string attention;            // the implementation probed
  int batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  double forward_ms = 0, backward_ms = 0;  // the second run, each call fenced
  std::string compared_with;        // the implementation compared with; "" when none could be
  double max_difference = 0;        // max |x - ref| / (1 + max |ref|) over O, dQ, dK, dV, per tensor
  double tolerance = 0;             // what the comparison allows for the activations' precision
  // cudnn: the workspace its graphs asked for at this shape, and the memory plan's estimate of it;
  // negative for the others.
  double workspace_bytes = -1, workspace_estimate_bytes = -1;
};

// Throws Error (ExitCode::failure) with the library's message when the attention cannot be built or
// run, or when the comparison exceeds the tolerance.
AttentionProbe probe_attention(const config::ModelConfig& model, int batch, int seq);

}  // namespace kgpt::probes
