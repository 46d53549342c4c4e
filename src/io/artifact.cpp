#include "io/artifact.hpp"

#include <brotli/decode.h>
#include <brotli/encode.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include "core/error.hpp"
#include "core/text.hpp"
#include "core/files.hpp"
#include "core/fp16.hpp"
#include "core/host_copy.hpp"

namespace kgpt::io {

namespace {

constexpr char kMagic[8] = {'K', 'G', 'P', 'T', 'I', 'N', 'T', '8'};
constexpr std::uint32_t kFormatVersion = 2;
constexpr std::size_t kHeaderBytes = 32;
constexpr double kClipQuantile = 99.99984 / 100.0;
// The clips a packed row tries, as quantiles of its |w| (1: the largest), in the order tried.
constexpr double kPackedClipQuantiles[] = {0.999, 0.9995, 0.9999, 0.99999, 1.0};
constexpr int kZlibLevel = 9;
constexpr int kZstdLevel = 22;
constexpr int kBrotliQuality = 11, kBrotliWindowBits = 24;  // brotli's best, and its largest standard window
// The header's compressor field.
constexpr std::uint32_t kZlibCodec = 0, kZstdCodec = 1, kBrotliCodec = 2;
// A zstd block of at least 3 bytes yields at most 128 KiB: a payload size beyond that bound is a
// corrupted header, refused before it is allocated.
constexpr std::uint64_t kZstdBlockBytes = 3, kZstdBlockOutput = 128 * 1024;
static_assert(sizeof(float) == 4, "artifacts store IEEE single precision");

// torch.quantile's linear interpolation between the two sorted values around q * (n - 1).
double quantile(std::vector<float> values, double q) {
  if (values.empty()) return 0.0;
  const double position = q * static_cast<double>(values.size() - 1);
  const auto low = static_cast<std::size_t>(std::floor(position));
  const std::size_t high = std::min(low + 1, values.size() - 1);
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(low), values.end());
  const double below = values[low];
  const double above = high == low ? below : *std::min_element(values.begin() + static_cast<std::ptrdiff_t>(low) + 1, values.end());
  return below + (above - below) * (position - static_cast<double>(low));
}

// The same interpolation on values already sorted in ascending order.
double sorted_quantile(const std::vector<float>& sorted, double q) {
  const double position = q * static_cast<double>(sorted.size() - 1);
  const auto low = static_cast<std::size_t>(std::floor(position));
  const std::size_t high = std::min(low + 1, sorted.size() - 1);
  return sorted[low] + (static_cast<double>(sorted[high]) - sorted[low]) * (position - static_cast<double>(low));
}

std::size_t packed_size(std::size_t codes, int bits) { return (codes * static_cast<std::size_t>(bits) + 7) / 8; }

// Codes in [0, 2^bits) packed least significant bit first.
void pack_code(std::vector<std::uint8_t>& bytes, std::size_t index, int bits, unsigned code) {
  std::size_t bit = index * static_cast<std::size_t>(bits);
  for (int done = 0; done < bits;) {
    const int at = static_cast<int>(bit % 8), take = std::min(bits - done, 8 - at);
    bytes[bit / 8] = static_cast<std::uint8_t>(bytes[bit / 8] | (((code >> done) & ((1u << take) - 1u)) << at));
    done += take;
    bit += static_cast<std::size_t>(take);
  }
}

unsigned unpack_code(const std::vector<std::uint8_t>& bytes, std::size_t index, int bits) {
  std::size_t bit = index * static_cast<std::size_t>(bits);
  unsigned code = 0;
  for (int done = 0; done < bits;) {
    const int at = static_cast<int>(bit % 8), take = std::min(bits - done, 8 - at);
    code |= ((static_cast<unsigned>(bytes[bit / 8]) >> at) & ((1u << take) - 1u)) << done;
    done += take;
    bit += static_cast<std::size_t>(take);
  }
  return code;
}

// One row's codes in [-R, R] and its fp16 scale by the packed rule (artifact.hpp).
std::uint16_t quantize_packed_row(const float* row, std::size_t columns, int limit, std::int8_t* codes) {
  std::vector<float> sorted(columns);
  for (std::size_t c = 0; c < columns; ++c) sorted[c] = std::fabs(row[c]);
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::int8_t> trial(columns);
  double best_error = std::numeric_limits<double>::infinity();
  std::uint16_t best_scale = 0;
  for (const double q : kPackedClipQuantiles) {
    const auto clip = static_cast<float>(sorted_quantile(sorted, q));
    const std::uint16_t scale_bits = float_to_half(std::min(clip / static_cast<float>(limit), 65504.0f));
    const float scale = half_to_float(scale_bits);
    double error = 0;
    for (std::size_t c = 0; c < columns; ++c) {
      const float code = scale > 0 ? quant::row_code(row[c], scale, static_cast<float>(limit)) : 0.0f;
      trial[c] = static_cast<std::int8_t>(code);
      const double e = static_cast<double>(row[c]) - static_cast<double>(code) * static_cast<double>(scale);
      error += e * e;
    }
    if (error < best_error) {
      best_error = error;
      best_scale = scale_bits;
      std::copy(trial.begin(), trial.end(), codes);
    }
  }
  return best_scale;
}

std::int8_t quantize(float value, float clip, float scale) {
  const float clipped = std::min(std::max(value, -clip), clip);
  return static_cast<std::int8_t>(quant::row_code(clipped, scale, 127.0f));
}

// Little-endian byte writer and bounds-checked reader of the payload.
class Writer {
 public:
  template <class T>
  void put(const T& value) {
    bytes_.append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  void put_string(const std::string& s) {
    put(static_cast<std::uint32_t>(s.size()));
    bytes_ += s;
  }
  template <class T>
  void put_array(const std::vector<T>& values) {
    bytes_.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  }
  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

class Reader {
 public:
  Reader(const std::string& bytes, const std::string& path) : bytes_(bytes), path_(path) {}
  template <class T>
  T get() {
    T value;
    need(sizeof(T));
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  std::string get_string() {
    const std::uint32_t n = get<std::uint32_t>();
    need(n);
    std::string s = bytes_.substr(at_, n);
    at_ += n;
    return s;
  }
  template <class T>
  std::vector<T> get_array(std::size_t count) {
    if (count > (bytes_.size() - at_) / sizeof(T)) corrupted();
    std::vector<T> values(count);
    std::memcpy(values.data(), bytes_.data() + at_, count * sizeof(T));
    at_ += count * sizeof(T);
    return values;
  }
  bool at_end() const { return at_ == bytes_.size(); }
  [[noreturn]] void corrupted() const {
    throw InputError(path_ + ": the artifact's contents are malformed (corrupted, or written by another program)");
  }

 private:
  void need(std::size_t n) const {
    if (n > bytes_.size() - at_) corrupted();
  }
  const std::string& bytes_;
  const std::string& path_;
  std::size_t at_ = 0;
};

std::uint32_t crc_of(const std::string& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  std::size_t at = 0;
  while (at < bytes.size()) {
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(bytes.size() - at, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), chunk);
    at += chunk;
  }
  return static_cast<std::uint32_t>(crc);
}

}  // namespace

const char* storage_name(TensorStorage storage) {
  switch (storage) {
    case TensorStorage::int8_rows: return "int8 per row";
    case TensorStorage::int8_tensor: return "int8 per tensor";
    case TensorStorage::fp16: return "fp16";
    case TensorStorage::fp32: return "fp32";
    case TensorStorage::packed_rows: return "packed per row";
    case TensorStorage::byte_rows: return "a byte per code, per row";
  }
  return "?";
}

std::string ArtifactTensor::storage_label() const {
  if (storage == TensorStorage::packed_rows) return "int" + std::to_string(bits) + " per row";
  if (storage == TensorStorage::byte_rows) return "int" + std::to_string(bits) + " per row, a byte each";
  return storage_name(storage);
}

std::size_t ArtifactTensor::elements() const {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

std::size_t ArtifactTensor::stored_bytes() const {
  return quantized.size() + packed.size() + half.size() * sizeof(std::uint16_t) + single.size() * sizeof(float);
}

std::vector<float> ArtifactTensor::dequantized() const {
  const std::size_t n = elements();
  std::vector<float> values(n);
  switch (storage) {
    case TensorStorage::int8_rows: {
      const std::size_t columns = shape.at(1);
      for (std::size_t r = 0; r < shape.at(0); ++r) {
        const float scale = half_to_float(half.at(r));
        for (std::size_t c = 0; c < columns; ++c) values[r * columns + c] = quantized[r * columns + c] * scale;
      }
      break;
    }
    case TensorStorage::int8_tensor:
      for (std::size_t i = 0; i < n; ++i) values[i] = quantized[i] * single.at(0);
      break;
    case TensorStorage::fp16:
      for (std::size_t i = 0; i < n; ++i) values[i] = half_to_float(half[i]);
      break;
    case TensorStorage::fp32:
      values = single;
      break;
    case TensorStorage::byte_rows: {
      const std::size_t columns = shape.at(1);
      for (std::size_t r = 0; r < shape.at(0); ++r) {
        const float scale = half_to_float(half.at(r));
        for (std::size_t c = 0; c < columns; ++c) values[r * columns + c] = static_cast<float>(quantized[r * columns + c]) * scale;
      }
      break;
    }
    case TensorStorage::packed_rows: {
      const std::size_t columns = shape.at(1);
      const auto limit = static_cast<unsigned>(code_limit(bits));
      for (std::size_t r = 0; r < shape.at(0); ++r) {
        const float scale = half_to_float(half.at(r));
        for (std::size_t c = 0; c < columns; ++c) {
          const auto code = static_cast<int>(unpack_code(packed, r * columns + c, bits)) - static_cast<int>(limit);
          values[r * columns + c] = static_cast<float>(code) * scale;
        }
      }
      break;
    }
  }
  return values;
}

ArtifactTensor with_byte_codes(const ArtifactTensor& t) {
  if (t.storage != TensorStorage::packed_rows) return t;
  ArtifactTensor out = t;
  out.storage = TensorStorage::byte_rows;
  out.packed.clear();
  out.quantized.resize(t.elements());
  const int limit = code_limit(t.bits);
  for (std::size_t i = 0; i < out.quantized.size(); ++i) {
    out.quantized[i] = static_cast<std::int8_t>(static_cast<int>(unpack_code(t.packed, i, t.bits)) - limit);
  }
  return out;
}

ArtifactTensor with_packed_codes(const ArtifactTensor& t) {
  if (t.storage != TensorStorage::byte_rows) return t;
  ArtifactTensor out = t;
  out.storage = TensorStorage::packed_rows;
  out.quantized.clear();
  out.packed.assign(packed_size(t.elements(), t.bits), 0);
  const int limit = code_limit(t.bits);
  for (std::size_t i = 0; i < t.quantized.size(); ++i) {
    pack_code(out.packed, i, t.bits, static_cast<unsigned>(t.quantized[i] + limit));
  }
  return out;
}

ArtifactTensor planned_tensor(const model::TensorSpec& spec, std::size_t keep_float_max, int bits) {
  ArtifactTensor t;
  t.name = spec.name;
  t.shape = spec.shape;
  const std::vector<std::size_t>& shape = spec.shape;
  const std::size_t n = t.elements();
  if (n <= keep_float_max) {
    t.storage = model::kept_in_fp32(spec.role) ? TensorStorage::fp32 : TensorStorage::fp16;
    if (t.storage == TensorStorage::fp32) t.single.resize(n);
    else t.half.resize(n);
  } else if (shape.size() == 2 && bits < 8) {
    t.storage = TensorStorage::packed_rows;
    t.bits = bits;
    t.half.resize(shape[0]);
    t.packed.resize(packed_size(n, bits));
  } else if (shape.size() == 2) {
    t.storage = TensorStorage::int8_rows;
    t.half.resize(shape[0]);
    t.quantized.resize(n);
  } else {
    t.storage = TensorStorage::int8_tensor;
    t.single.resize(1);
    t.quantized.resize(n);
  }
  return t;
}

ArtifactTensor quantize_tensor(const model::TensorSpec& spec, const float* values, std::size_t keep_float_max,
                               int bits) {
  if (bits < 4 || bits > 8) throw Error(ExitCode::failure, "artifact: " + std::to_string(bits) + " bits per weight (4-8 are stored)");
  ArtifactTensor t;
  t.name = spec.name;
  t.shape = spec.shape;
  const std::vector<std::size_t>& shape = spec.shape;
  const std::size_t n = t.elements();
  if (n > keep_float_max && shape.size() == 2 && bits < 8) {
    t = planned_tensor(spec, keep_float_max, bits);
    const std::size_t rows = shape[0], columns = shape[1];
    const int limit = code_limit(bits);
    std::vector<std::int8_t> codes(columns);
    for (std::size_t r = 0; r < rows; ++r) {
      t.half[r] = quantize_packed_row(values + r * columns, columns, limit, codes.data());
      for (std::size_t c = 0; c < columns; ++c) {
        pack_code(t.packed, r * columns + c, bits, static_cast<unsigned>(codes[c] + limit));
      }
    }
    return t;
  }
  if (n <= keep_float_max) {
    if (model::kept_in_fp32(spec.role)) {
      t.storage = TensorStorage::fp32;
      t.single.assign(values, values + n);
    } else {
      t.storage = TensorStorage::fp16;
      t.half.resize(n);
      for (std::size_t i = 0; i < n; ++i) t.half[i] = float_to_half(values[i]);
    }
    return t;
  }
  t.quantized.resize(n);
  if (shape.size() == 2) {
    t.storage = TensorStorage::int8_rows;
    const std::size_t rows = shape[0], columns = shape[1];
    t.half.resize(rows);
    std::vector<float> magnitudes(columns);
    for (std::size_t r = 0; r < rows; ++r) {
      const float* row = values + r * columns;
      for (std::size_t c = 0; c < columns; ++c) magnitudes[c] = std::fabs(row[c]);
      const auto clip = static_cast<float>(quantile(magnitudes, kClipQuantile));
      const float scale = std::max(clip / 127.0f, 1.0f / 127.0f);
      t.half[r] = float_to_half(scale);
      for (std::size_t c = 0; c < columns; ++c) t.quantized[r * columns + c] = quantize(row[c], clip, scale);
    }
  } else {
    t.storage = TensorStorage::int8_tensor;
    std::vector<float> magnitudes(n);
    for (std::size_t i = 0; i < n; ++i) magnitudes[i] = std::fabs(values[i]);
    const auto clip = static_cast<float>(quantile(magnitudes, kClipQuantile));
    const float scale = clip > 0 ? clip / 127.0f : 1.0f;
    t.single = {scale};
    for (std::size_t i = 0; i < n; ++i) t.quantized[i] = quantize(values[i], clip, scale);
  }
  return t;
}

namespace {

std::string payload_of(const Artifact& artifact) {
  Writer payload;
  payload.put_string(artifact.deck_text);
  payload.put(artifact.step);
  payload.put(static_cast<std::uint32_t>(artifact.metadata.size()));
  for (const auto& [key, value] : artifact.metadata) {
    payload.put_string(key);
    payload.put_string(value);
  }
  payload.put(static_cast<std::uint32_t>(artifact.tensors.size()));
  for (const auto& t : artifact.tensors) {
    payload.put_string(t.name);
    payload.put(static_cast<std::uint8_t>(t.storage));
    payload.put(static_cast<std::uint32_t>(t.shape.size()));
    for (std::size_t d : t.shape) payload.put(static_cast<std::uint64_t>(d));
    if (t.storage == TensorStorage::packed_rows || t.storage == TensorStorage::byte_rows) {
      payload.put(static_cast<std::uint8_t>(t.bits));
    }
    payload.put_array(t.half);
    payload.put_array(t.single);
    payload.put_array(t.quantized);
    payload.put_array(t.packed);
  }
  return std::move(payload.bytes());
}

std::uint32_t codec_of(config::Compression compression) {
  switch (compression) {
    case config::Compression::zlib: return kZlibCodec;
    case config::Compression::zstd: return kZstdCodec;
    case config::Compression::brotli: return kBrotliCodec;
  }
  return kZlibCodec;
}

// Brotli's output, grown as it comes and never past `expected` bytes (a corrupted header's size is
// never allocated up front); false where the stream is damaged, ends early or holds more.
bool brotli_decompress(const char* source, std::size_t size, std::size_t expected, std::string& raw) {
  BrotliDecoderState* state = BrotliDecoderCreateInstance(nullptr, nullptr, nullptr);
  if (state == nullptr) throw Error(ExitCode::failure, "artifact: brotli could not start a decoder");
  raw.clear();
  const auto* next_in = reinterpret_cast<const std::uint8_t*>(source);
  std::size_t available_in = size;
  BrotliDecoderResult result = BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT;
  while (result == BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT && raw.size() < expected) {
    const std::size_t done = raw.size();
    raw.resize(std::min(expected, std::max<std::size_t>(done * 2, 1 << 16)));
    auto* next_out = reinterpret_cast<std::uint8_t*>(&raw[done]);
    std::size_t available_out = raw.size() - done;
    result = BrotliDecoderDecompressStream(state, &available_in, &next_in, &available_out, &next_out, nullptr);
    raw.resize(raw.size() - available_out);
  }
  if (result == BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT && raw.size() == expected) {
    // Full: the stream may still have its end to read, or more output than the header declares.
    std::size_t available_out = 0;
    std::uint8_t* next_out = nullptr;
    result = BrotliDecoderDecompressStream(state, &available_in, &next_in, &available_out, &next_out, nullptr);
  }
  const bool whole = result == BROTLI_DECODER_RESULT_SUCCESS && available_in == 0 && raw.size() == expected;
  BrotliDecoderDestroyInstance(state);
  return whole;
}

std::string compressed(const std::string& raw, config::Compression compression) {
  std::string out(largest_file_bytes(raw.size(), compression) - kHeaderBytes, '\0');
  if (compression == config::Compression::brotli) {
    std::size_t size = out.size();
    if (BrotliEncoderCompress(kBrotliQuality, kBrotliWindowBits, BROTLI_MODE_GENERIC, raw.size(),
                              reinterpret_cast<const std::uint8_t*>(raw.data()), &size,
                              reinterpret_cast<std::uint8_t*>(&out[0])) == BROTLI_FALSE) {
      throw Error(ExitCode::failure, "artifact: brotli compression failed");
    }
    out.resize(size);
    return out;
  }
  if (compression == config::Compression::zstd) {
    const std::size_t size = ZSTD_compress(&out[0], out.size(), raw.data(), raw.size(), kZstdLevel);
    if (ZSTD_isError(size)) throw Error(ExitCode::failure, std::string("artifact: zstd compression failed: ") + ZSTD_getErrorName(size));
    out.resize(size);
    return out;
  }
  auto size = static_cast<uLongf>(out.size());
  if (compress2(reinterpret_cast<Bytef*>(&out[0]), &size, reinterpret_cast<const Bytef*>(raw.data()),
                static_cast<uLong>(raw.size()), kZlibLevel) != Z_OK) {
    throw Error(ExitCode::failure, "artifact: zlib compression failed");
  }
  out.resize(size);
  return out;
}

}  // namespace

std::size_t payload_bytes(const Artifact& artifact) { return payload_of(artifact).size(); }

std::string compress(const std::string& raw, config::Compression compression) { return compressed(raw, compression); }

std::size_t largest_file_bytes(std::size_t payload, config::Compression compression) {
  switch (compression) {
    case config::Compression::zstd: return kHeaderBytes + ZSTD_compressBound(payload);
    case config::Compression::brotli: return kHeaderBytes + BrotliEncoderMaxCompressedSize(payload);
    case config::Compression::zlib: break;
  }
  return kHeaderBytes + compressBound(static_cast<uLong>(payload));
}

std::string serialize_artifact(const Artifact& artifact) {
  const std::string raw = payload_of(artifact);
  Writer header;
  header.bytes().append(kMagic, sizeof(kMagic));
  header.put(kFormatVersion);
  header.put(codec_of(artifact.compression));
  header.put(static_cast<std::uint64_t>(raw.size()));
  header.put(crc_of(raw));
  header.put(std::uint32_t{0});
  return header.bytes() + compressed(raw, artifact.compression);
}

const char* weight_group_name(WeightGroup group) {
  switch (group) {
    case WeightGroup::embed: return "embed";
    case WeightGroup::attention: return "attention";
    case WeightGroup::mlp: return "mlp";
    case WeightGroup::other: return "other";
  }
  return "?";
}

WeightGroup weight_group(const model::TensorSpec& spec) {
  switch (spec.role) {
    case model::Role::embedding:
    case model::Role::head: return WeightGroup::embed;
    case model::Role::attention: return WeightGroup::attention;
    case model::Role::mlp: return WeightGroup::mlp;
    case model::Role::projection:
    case model::Role::control:
    case model::Role::norm:
    case model::Role::bias: return WeightGroup::other;
  }
  return WeightGroup::other;
}

int export_bits(WeightGroup group, const config::ExportConfig& config) {
  switch (group) {
    case WeightGroup::embed: return config.embed_bits;
    case WeightGroup::attention: return config.attention_bits;
    case WeightGroup::mlp: return config.mlp_bits;
    case WeightGroup::other: return 8;
  }
  return 8;
}

bool is_artifact_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[sizeof(kMagic)] = {};
  return in.read(magic, sizeof(magic)) && std::memcmp(magic, kMagic, sizeof(kMagic)) == 0;
}

Artifact read_artifact(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open the artifact: " + std::strerror(errno));
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (file.size() < sizeof(kMagic) || std::memcmp(file.data(), kMagic, sizeof(kMagic)) != 0) {
    throw InputError(path + ": not a kgpt artifact (no KGPTINT8 header); `kgpt export` makes them from checkpoints");
  }
  if (file.size() < kHeaderBytes) throw InputError(path + ": the artifact is truncated (" + std::to_string(file.size()) + " bytes)");
  const std::string header = file.substr(0, kHeaderBytes);
  Reader fields(header, path);
  fields.get_array<char>(sizeof(kMagic));
  const auto version = fields.get<std::uint32_t>();
  const auto codec = fields.get<std::uint32_t>();
  const auto raw_size = fields.get<std::uint64_t>();
  const auto crc = fields.get<std::uint32_t>();
  if (version != 1 && version != kFormatVersion) {
    throw InputError(path + ": artifact format version " + std::to_string(version) + "; this kgpt reads versions 1 and " +
                     std::to_string(kFormatVersion));
  }
  if (codec != kZlibCodec && (version == 1 || (codec != kZstdCodec && codec != kBrotliCodec))) {
    throw InputError(path + ": the artifact's header names compressor " + std::to_string(codec) +
                     ", none of zlib (0), zstd (1) and brotli (2): corrupted, or written by a newer kgpt");
  }
  if (raw_size > (std::uint64_t{1} << 40)) throw InputError(path + ": the artifact's header is corrupted");
  // A payload size above what the compressed bytes can expand to is a corrupted header, refused
  // before it is allocated (a 1.5 kB file claiming 537 MB took 7 s and its memory to refuse): zlib
  // expands at most 1032-fold, zstd at most 128 KiB per 3-byte block.
  const std::uint64_t packed = file.size() - kHeaderBytes;
  // Brotli's decoder grows its output as it goes (brotli_decompress), so its size needs no such bound.
  const std::uint64_t most = codec == kZstdCodec ? (packed / kZstdBlockBytes + 1) * kZstdBlockOutput : packed * 1032 + 64;
  if (codec != kBrotliCodec && raw_size > most) {
    throw InputError(path + ": the artifact is truncated or corrupted (its header declares " + std::to_string(raw_size) +
                     " bytes of payload, more than its " + std::to_string(packed) + " compressed bytes can hold)");
  }
  std::string raw;
  const char* source = file.data() + kHeaderBytes;
  if (codec == kBrotliCodec) {
    if (!brotli_decompress(source, packed, static_cast<std::size_t>(raw_size), raw)) {
      throw InputError(path + ": the artifact is truncated or corrupted (brotli: the stream is damaged, or does not "
                       "hold the " + std::to_string(raw_size) + " bytes its header declares)");
    }
  } else if (codec == kZstdCodec) {
    raw.assign(static_cast<std::size_t>(raw_size), '\0');
    const std::size_t produced = ZSTD_decompress(&raw[0], raw.size(), source, packed);
    if (ZSTD_isError(produced) || produced != raw_size) {
      throw InputError(path + ": the artifact is truncated or corrupted (" +
                       (ZSTD_isError(produced) ? std::string("zstd: ") + ZSTD_getErrorName(produced) : "short payload") + ")");
    }
  } else {
    raw.assign(static_cast<std::size_t>(raw_size), '\0');
    uLongf produced = static_cast<uLongf>(raw_size);
    const int code = uncompress(reinterpret_cast<Bytef*>(&raw[0]), &produced, reinterpret_cast<const Bytef*>(source),
                                static_cast<uLong>(packed));
    if (code != Z_OK || produced != raw_size) {
      throw InputError(path + ": the artifact is truncated or corrupted (" +
                       (code == Z_OK ? "short payload" : std::string("zlib: ") + zError(code)) + ")");
    }
  }
  if (crc_of(raw) != crc) throw InputError(path + ": the artifact is corrupted (CRC-32 mismatch)");

  Reader r(raw, path);
  Artifact artifact;
  artifact.compression = codec == kZstdCodec     ? config::Compression::zstd
                         : codec == kBrotliCodec ? config::Compression::brotli
                                                 : config::Compression::zlib;
  artifact.deck_text = r.get_string();
  artifact.step = r.get<std::int64_t>();
  const auto entries = r.get<std::uint32_t>();
  for (std::uint32_t i = 0; i < entries; ++i) {
    std::string key = r.get_string();
    artifact.metadata[key] = r.get_string();
  }
  const auto tensors = r.get<std::uint32_t>();
  for (std::uint32_t i = 0; i < tensors; ++i) {
    ArtifactTensor t;
    t.name = r.get_string();
    const auto storage = r.get<std::uint8_t>();
    const auto last = version == 1 ? TensorStorage::fp32 : TensorStorage::byte_rows;
    if (storage > static_cast<std::uint8_t>(last)) r.corrupted();
    t.storage = static_cast<TensorStorage>(storage);
    const bool rows = t.storage == TensorStorage::int8_rows || t.storage == TensorStorage::packed_rows ||
                      t.storage == TensorStorage::byte_rows;
    const auto rank = r.get<std::uint32_t>();
    if (rank > 8) r.corrupted();
    for (std::uint32_t d = 0; d < rank; ++d) t.shape.push_back(static_cast<std::size_t>(r.get<std::uint64_t>()));
    if (rows && rank != 2) r.corrupted();
    // A shape whose element count overflows, or exceeds the payload, is refused before allocating.
    std::size_t n = 1;
    for (std::size_t d : t.shape) {
      if (d != 0 && n > raw.size() * 8 / d) r.corrupted();
      n *= d;
    }
    switch (t.storage) {
      case TensorStorage::int8_rows:
        t.half = r.get_array<std::uint16_t>(t.shape[0]);
        t.quantized = r.get_array<std::int8_t>(n);
        break;
      case TensorStorage::int8_tensor:
        t.single = r.get_array<float>(1);
        t.quantized = r.get_array<std::int8_t>(n);
        break;
      case TensorStorage::fp16: t.half = r.get_array<std::uint16_t>(n); break;
      case TensorStorage::fp32: t.single = r.get_array<float>(n); break;
      case TensorStorage::packed_rows: {
        t.bits = r.get<std::uint8_t>();
        if (t.bits < 4 || t.bits > 7) r.corrupted();
        t.half = r.get_array<std::uint16_t>(t.shape[0]);
        t.packed = r.get_array<std::uint8_t>(packed_size(n, t.bits));
        const auto highest = static_cast<unsigned>(2 * code_limit(t.bits));
        for (std::size_t i = 0; i < n; ++i) {
          if (unpack_code(t.packed, i, t.bits) > highest) r.corrupted();
        }
        break;
      }
      case TensorStorage::byte_rows: {
        t.bits = r.get<std::uint8_t>();
        if (t.bits < 4 || t.bits > 7) r.corrupted();
        t.half = r.get_array<std::uint16_t>(t.shape[0]);
        t.quantized = r.get_array<std::int8_t>(n);
        const int limit = code_limit(t.bits);
        for (const std::int8_t q : t.quantized) {
          if (q < -limit || q > limit) r.corrupted();
        }
        break;
      }
    }
    artifact.tensors.push_back(std::move(t));
  }
  if (!r.at_end()) r.corrupted();
  return artifact;
}

std::size_t write_artifact(const std::string& path, const Artifact& artifact) {
  const std::string bytes = serialize_artifact(artifact);
  write_file_atomically(path, bytes);
  return bytes.size();
}

void load_artifact_weights(const std::string& path, const Artifact& artifact, const model::Parameters<float>& params) {
  const auto& layout = params.layout();
  if (artifact.tensors.size() != layout.entries().size()) {
    throw InputError(path + ": the artifact holds " + std::to_string(artifact.tensors.size()) + " tensors; this model has " +
                     std::to_string(layout.entries().size()) + " (a different architecture; check model.* in the deck)");
  }
  std::vector<float> host(params.values().extent(0), 0.0f);
  for (const auto& t : artifact.tensors) {
    if (!layout.contains(t.name)) {
      throw InputError(path + ": tensor '" + t.name + "' is not in this model (check model.* in the deck)");
    }
    const auto& entry = layout.find(t.name);
    if (entry.spec.shape != t.shape) {
      throw InputError(path + ": tensor '" + t.name + "' is " + text::shape(t.shape) + " in the artifact and " +
                       text::shape(entry.spec.shape) + " in this model (check model.* in the deck)");
    }
    const std::vector<float> values = t.dequantized();
    std::copy(values.begin(), values.end(), host.begin() + static_cast<std::ptrdiff_t>(entry.offset));
  }
  from_host(host, params.values());
}

}  // namespace kgpt::io
