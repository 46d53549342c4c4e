#pragma once
// Model artifacts (`kgpt export`): a checkpoint's weights compressed the way parameter-golf scores
// a submission, and read back by eval, sample and inspect like a checkpoint.
//
// Each tensor is stored by size and name:
//   - more than keep_float_max (65,536) elements, 2-D: int8 per row. The row's clip is the
//     99.99984th percentile of |w| (linear interpolation between sorted values, as torch.quantile
//     computes it); scale = max(clip / 127, 1 / 127); q = round-half-even(clamp(w, -clip, clip) /
//     scale) in [-127, 127]; the scales are stored in fp16 and the row dequantises as q * scale.
//   - more than keep_float_max elements, other ranks: int8 with one fp32 scale, clip / 127 (1 when
//     the clip is 0), over the whole tensor.
//   - at most keep_float_max elements: fp32 for the control tensors (names holding attn_scale,
//     mlp_scale, resid_mix, q_gain or skip_weight), fp16 for the rest.
// The file is a 32-byte header (magic "KGPTINT8", format version, the payload's size and CRC-32)
// followed by the payload compressed with zlib at level 9. The payload holds the checkpoint's
// resolved deck, its step, a few metadata strings and the tensors, little-endian.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/parameters.hpp"

namespace kgpt::io {

enum class TensorStorage : std::uint8_t { int8_rows = 0, int8_tensor = 1, fp16 = 2, fp32 = 3 };
const char* storage_name(TensorStorage storage);

struct ArtifactTensor {
  std::string name;
  std::vector<std::size_t> shape;
  TensorStorage storage = TensorStorage::fp32;
  std::vector<std::int8_t> quantized;  // int8 storages
  std::vector<std::uint16_t> half;     // fp16 storage: the values; int8_rows: the row scales
  std::vector<float> single;           // fp32 storage: the values; int8_tensor: the one scale
  std::size_t elements() const;
  std::size_t stored_bytes() const;
  // The values it stands for, in float.
  std::vector<float> dequantized() const;
};

struct Artifact {
  std::string deck_text;
  std::int64_t step = 0;
  std::map<std::string, std::string> metadata;  // kgpt_version, git_sha, checkpoint, run_dir
  std::vector<ArtifactTensor> tensors;
};

constexpr std::size_t kKeepFloatMaxElements = 65536;

// The storage of one tensor by the rules above (int8 tensors get their scales computed here).
ArtifactTensor quantize_tensor(const std::string& name, const std::vector<std::size_t>& shape, const float* values,
                               std::size_t keep_float_max = kKeepFloatMaxElements);

// The file's bytes, and back. read_artifact throws InputError naming the file when it is not an
// artifact, is truncated or corrupted (size, CRC or structure), or has another format version.
std::string serialize_artifact(const Artifact& artifact);
Artifact read_artifact(const std::string& path);
// Writes atomically (a temporary file renamed into place); returns the file's size in bytes.
std::size_t write_artifact(const std::string& path, const Artifact& artifact);

// True when the file starts with the artifact magic.
bool is_artifact_file(const std::string& path);

// Dequantises every tensor into `params` after checking that names and shapes match this model;
// throws InputError naming the file and the tensor otherwise.
void load_artifact_weights(const std::string& path, const Artifact& artifact, const model::Parameters<float>& params);

}  // namespace kgpt::io
