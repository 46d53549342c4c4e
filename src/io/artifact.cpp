#include "io/artifact.hpp"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/error.hpp"
#include "core/text.hpp"
#include "core/files.hpp"
#include "core/fp16.hpp"
#include "core/host_copy.hpp"

namespace kgpt::io {

namespace {

constexpr char kMagic[8] = {'K', 'G', 'P', 'T', 'I', 'N', 'T', '8'};
constexpr std::uint32_t kFormatVersion = 1;
constexpr std::size_t kHeaderBytes = 32;
constexpr double kClipQuantile = 99.99984 / 100.0;
// Small tensors that steer the network kept in fp32, as parameter-golf keeps them.
const char* const kControlNames[] = {"attn_scale", "mlp_scale", "resid_mix", "q_gain", "skip_weight"};

static_assert(sizeof(float) == 4, "artifacts store IEEE single precision");

bool is_control(const std::string& name) {
  return std::any_of(std::begin(kControlNames), std::end(kControlNames),
                     [&](const char* pattern) { return name.find(pattern) != std::string::npos; });
}

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

std::int8_t quantize(float value, float clip, float scale) {
  const float clipped = std::min(std::max(value, -clip), clip);
  const float q = std::nearbyint(clipped / scale);  // the default rounding mode: half to even
  return static_cast<std::int8_t>(std::min(std::max(q, -127.0f), 127.0f));
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
  }
  return "?";
}

std::size_t ArtifactTensor::elements() const {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

std::size_t ArtifactTensor::stored_bytes() const {
  return quantized.size() + half.size() * sizeof(std::uint16_t) + single.size() * sizeof(float);
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
  }
  return values;
}

ArtifactTensor quantize_tensor(const std::string& name, const std::vector<std::size_t>& shape, const float* values,
                               std::size_t keep_float_max) {
  ArtifactTensor t;
  t.name = name;
  t.shape = shape;
  const std::size_t n = t.elements();
  if (n <= keep_float_max) {
    if (is_control(name)) {
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

std::string serialize_artifact(const Artifact& artifact) {
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
    payload.put_array(t.half);
    payload.put_array(t.single);
    payload.put_array(t.quantized);
  }
  const std::string& raw = payload.bytes();
  uLongf compressed_size = compressBound(static_cast<uLong>(raw.size()));
  std::string compressed(compressed_size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(&compressed[0]), &compressed_size, reinterpret_cast<const Bytef*>(raw.data()),
                static_cast<uLong>(raw.size()), 9) != Z_OK) {
    throw Error(ExitCode::failure, "artifact: zlib compression failed");
  }
  compressed.resize(compressed_size);
  Writer header;
  header.bytes().append(kMagic, sizeof(kMagic));
  header.put(kFormatVersion);
  header.put(std::uint32_t{0});
  header.put(static_cast<std::uint64_t>(raw.size()));
  header.put(crc_of(raw));
  header.put(std::uint32_t{0});
  return header.bytes() + compressed;
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
  fields.get<std::uint32_t>();
  const auto raw_size = fields.get<std::uint64_t>();
  const auto crc = fields.get<std::uint32_t>();
  if (version != kFormatVersion) {
    throw InputError(path + ": artifact format version " + std::to_string(version) + "; this kgpt reads version " +
                     std::to_string(kFormatVersion));
  }
  if (raw_size > (std::uint64_t{1} << 40)) throw InputError(path + ": the artifact's header is corrupted");
  // zlib expands at most 1032-fold, so a payload size above that is a corrupted header, refused before
  // it is allocated (a 1.5 kB file claiming 537 MB took 7 s and its memory to refuse).
  const std::uint64_t compressed = file.size() - kHeaderBytes;
  if (raw_size > compressed * 1032 + 64) {
    throw InputError(path + ": the artifact is truncated or corrupted (its header declares " + std::to_string(raw_size) +
                     " bytes of payload, more than its " + std::to_string(compressed) + " compressed bytes can hold)");
  }
  std::string raw(static_cast<std::size_t>(raw_size), '\0');
  uLongf produced = static_cast<uLongf>(raw_size);
  const int code = uncompress(reinterpret_cast<Bytef*>(&raw[0]), &produced,
                              reinterpret_cast<const Bytef*>(file.data() + kHeaderBytes),
                              static_cast<uLong>(file.size() - kHeaderBytes));
  if (code != Z_OK || produced != raw_size) {
    throw InputError(path + ": the artifact is truncated or corrupted (" +
                     (code == Z_OK ? "short payload" : std::string("zlib: ") + zError(code)) + ")");
  }
  if (crc_of(raw) != crc) throw InputError(path + ": the artifact is corrupted (CRC-32 mismatch)");

  Reader r(raw, path);
  Artifact artifact;
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
    if (storage > static_cast<std::uint8_t>(TensorStorage::fp32)) r.corrupted();
    t.storage = static_cast<TensorStorage>(storage);
    const auto rank = r.get<std::uint32_t>();
    if (rank > 8) r.corrupted();
    for (std::uint32_t d = 0; d < rank; ++d) t.shape.push_back(static_cast<std::size_t>(r.get<std::uint64_t>()));
    if (t.storage == TensorStorage::int8_rows && rank != 2) r.corrupted();
    const std::size_t n = t.elements();
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
