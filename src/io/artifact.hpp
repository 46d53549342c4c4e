#pragma once
// Model artifacts (`kgpt export`): a checkpoint's weights compressed the way parameter-golf scores
// a submission, and read back by eval, sample and inspect like a checkpoint.
//
// Each tensor is stored by size, name and the bits its group gets (the deck's export section):
//   - more than keep_float_max (65,536) elements, 2-D, 8 bits: int8 per row, parameter-golf's
//     baseline format. The row's clip is the 99.99984th percentile of |w| (linear interpolation
//     between sorted values, as torch.quantile computes it); scale = max(clip / 127, 1 / 127);
//     q = round-half-even(clamp(w, -clip, clip) / scale) in [-127, 127]; the scales are stored in
//     fp16 and the row dequantises as q * scale.
//   - more than keep_float_max elements, 2-D, b = 4..7 bits: per-row codes of b bits. With
//     R = 2^(b-1) - 1, each row tries the clips c of |w|'s 99.9th, 99.95th, 99.99th and 99.999th
//     percentiles and its maximum: s = fp16(c / R) (in float, then rounded to fp16),
//     q = clamp(round-half-even(w / s), -R, R) (q = 0 where s is 0), and keeps the first with the
//     least sum of (w - q s)^2; the row dequantises as q * s. No floor on s: parameter-golf's 1/R
//     floor would make the step of an int6 row 1/31, coarser than trained golf weights need. The
//     codes are stored one of two ways (CodeLayout): packed, q + R in b bits each, least significant
//     bit first, row after row; or bytes, q as one int8 each, as parameter-golf's records store
//     them, which the compressor then codes by their frequencies (smaller after zstd at 5-7 bits).
//   - more than keep_float_max elements, other ranks: int8 with one fp32 scale, clip / 127 (1 when
//     the clip is 0), over the whole tensor.
//   - at most keep_float_max elements: fp32 for the control tensors (model::Role::control: golf's
//     scales, gains, mixes, skip weights, SmearGate's gate and BigramHash's scale), fp16 for the rest.
// The rounding of a row is quant/rows.hpp's, which late QAT trains against.
// The file is a 32-byte header (magic "KGPTINT8", format version 2, the compressor, the payload's
// size and CRC-32) followed by the payload compressed with zlib at level 9, zstd at level 22 or brotli
// at quality 11 with a 2^24-byte window (compressor 2, parameter-golf's SP1024 record's). The
// payload holds the checkpoint's resolved deck, its step, a few metadata strings and the tensors,
// little-endian. Version 1 files (zlib, no packed rows) read as before.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "model/parameters.hpp"
#include "quant/rows.hpp"

namespace kgpt::io {

enum class TensorStorage : std::uint8_t { int8_rows = 0, int8_tensor = 1, fp16 = 2, fp32 = 3, packed_rows = 4, byte_rows = 5 };
const char* storage_name(TensorStorage storage);

struct ArtifactTensor {
  std::string name;
  std::vector<std::size_t> shape;
  TensorStorage storage = TensorStorage::fp32;
  std::vector<std::int8_t> quantized;  // int8 storages, and byte_rows' codes
  std::vector<std::uint16_t> half;     // fp16 storage: the values; int8_rows: the row scales
  std::vector<float> single;           // fp32 storage: the values; int8_tensor: the one scale
  int bits = 8;                        // packed_rows, byte_rows: bits per code (4-7)
  std::vector<std::uint8_t> packed;    // packed_rows: the codes; `half` holds the row scales (byte_rows' too)
  std::size_t elements() const;
  std::size_t stored_bytes() const;
  // "int8 per row", "int6 per row", "fp16", ...
  std::string storage_label() const;
  // The values it stands for, in float.
  std::vector<float> dequantized() const;
};

struct Artifact {
  std::string deck_text;
  std::int64_t step = 0;
  std::map<std::string, std::string> metadata;  // kgpt_version, git_sha, checkpoint, run_dir
  std::vector<ArtifactTensor> tensors;
  config::Compression compression = config::Compression::zlib;
};

constexpr std::size_t kKeepFloatMaxElements = 65536;
// parameter-golf's limit on a submission's bytes (its code and compressed weights).
constexpr std::size_t kArtifactLimitBytes = 16000000;

using quant::code_limit;

// The storage of one tensor by the rules above, from its spec's name, shape and role (quantized
// tensors get their scales computed here); `bits` applies to 2-D tensors above keep_float_max.
ArtifactTensor quantize_tensor(const model::TensorSpec& spec, const float* values,
                               std::size_t keep_float_max = kKeepFloatMaxElements, int bits = 8);
// Packed rows as byte rows (one int8 code each) and back; other storages are returned as they are.
ArtifactTensor with_byte_codes(const ArtifactTensor& t);
ArtifactTensor with_packed_codes(const ArtifactTensor& t);

// The same storage with every value zero, without quantizing: its sizes, for planning.
ArtifactTensor planned_tensor(const model::TensorSpec& spec, std::size_t keep_float_max = kKeepFloatMaxElements,
                              int bits = 8);

// The groups whose bits the deck sets (export.embed_bits, attention_bits, mlp_bits), and which a
// parameter belongs to, by its role: embeddings and the head to embed, the blocks' attention and MLP
// matrices to theirs. `other` tensors are stored in 8 bits.
enum class WeightGroup { embed, attention, mlp, other };
const char* weight_group_name(WeightGroup group);
WeightGroup weight_group(const model::TensorSpec& spec);
int export_bits(WeightGroup group, const config::ExportConfig& config);

// The payload's bytes before compression, and the most the compressor can make of them (the
// compressor's own bound, plus the header): the artifact's size can be no larger.
std::size_t payload_bytes(const Artifact& artifact);
std::size_t largest_file_bytes(std::size_t payload_bytes, config::Compression compression);
// `raw` compressed as an artifact's payload is, without the header (kgpt golf-check counts the
// source's bytes with it).
std::string compress(const std::string& raw, config::Compression compression);

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
