#include "io/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <utility>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/fp16.hpp"

namespace kgpt::io {

namespace {

using Json = nlohmann::json;

// The reference implementation refuses headers above 100 MB; so does kgpt, before reading one.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

std::size_t dtype_bytes(SafetensorsDtype dtype) { return dtype == SafetensorsDtype::f32 ? 4 : 2; }

std::uint64_t read_le64(const unsigned char* p) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

void append_le64(std::string& out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xffu));
}

void append_value(std::string& out, float value, SafetensorsDtype dtype) {
  unsigned char bytes[4];
  std::size_t n = 0;
  if (dtype == SafetensorsDtype::f32) {
    std::uint32_t word;
    std::memcpy(&word, &value, 4);
    for (int i = 0; i < 4; ++i) bytes[n++] = static_cast<unsigned char>((word >> (8 * i)) & 0xffu);
  } else {
    const std::uint16_t half = dtype == SafetensorsDtype::bf16 ? bf16(value).bits : float_to_half(value);
    bytes[n++] = static_cast<unsigned char>(half & 0xffu);
    bytes[n++] = static_cast<unsigned char>(half >> 8);
  }
  out.append(reinterpret_cast<const char*>(bytes), n);
}

float read_value(const unsigned char* p, SafetensorsDtype dtype) {
  if (dtype == SafetensorsDtype::f32) {
    const std::uint32_t word = static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                               static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
    float value;
    std::memcpy(&value, &word, 4);
    return value;
  }
  const auto half = static_cast<std::uint16_t>(p[0] | p[1] << 8);
  return dtype == SafetensorsDtype::bf16 ? static_cast<float>(bf16::from_bits(half)) : half_to_float(half);
}

// A count of elements, or nothing when the product overflows.
bool product(const std::vector<std::size_t>& shape, std::size_t& out) {
  out = 1;
  for (const std::size_t d : shape) {
    if (d != 0 && out > std::numeric_limits<std::size_t>::max() / d) return false;
    out *= d;
  }
  return true;
}

}  // namespace

const char* dtype_name(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::f32: return "F32";
    case SafetensorsDtype::f16: return "F16";
    case SafetensorsDtype::bf16: return "BF16";
  }
  return "?";
}

std::size_t SafetensorsTensor::elements() const {
  std::size_t n = 0;
  product(shape, n);
  return n;
}

std::string serialize_safetensors(const SafetensorsFile& file) {
  if (file.dtype == SafetensorsDtype::f16) throw Error(ExitCode::failure, "safetensors: kgpt writes F32 or BF16");
  Json header = Json::object();
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  std::size_t offset = 0;
  for (const SafetensorsTensor& t : file.tensors) {
    if (t.values.size() != t.elements()) {
      throw Error(ExitCode::failure, "safetensors: " + t.name + " holds " + std::to_string(t.values.size()) +
                                         " values for its shape's " + std::to_string(t.elements()));
    }
    const std::size_t bytes = t.values.size() * dtype_bytes(file.dtype);
    header[t.name] = {{"dtype", dtype_name(file.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out;
  out.reserve(8 + text.size() + offset);
  append_le64(out, text.size());
  out += text;
  for (const SafetensorsTensor& t : file.tensors) {
    for (const float v : t.values) append_value(out, v, file.dtype);
  }
  return out;
}

std::string read_safetensors_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open the safetensors file");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw InputError(path + ": cannot read the safetensors file");
  return bytes;
}

SafetensorsFile read_safetensors(const std::string& path) { return parse_safetensors(read_safetensors_bytes(path), path); }

SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& path) {
  const auto fail = [&path](const std::string& what) { return InputError(path + ": not a valid safetensors file: " + what); };
  if (bytes.size() < 8) {
    throw fail("it has " + std::to_string(bytes.size()) + " bytes, fewer than the 8 of the header's length");
  }
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::uint64_t header_bytes = read_le64(data);
  if (header_bytes > kMaxHeaderBytes || header_bytes > bytes.size() - 8) {
    throw fail("the header's length is " + std::to_string(header_bytes) + " bytes, more than the " +
               std::to_string(bytes.size() - 8) + " after it" + (header_bytes > kMaxHeaderBytes ? " (or 100 MB)" : ""));
  }
  Json header;
  try {
    header = Json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header_bytes));
  } catch (const Json::exception& e) {
    throw fail(std::string("the header is not JSON (") + e.what() + ")");
  }
  if (!header.is_object()) throw fail("the header is not a JSON object");
  const std::size_t data_begin = 8 + static_cast<std::size_t>(header_bytes);
  const std::size_t data_size = bytes.size() - data_begin;

  SafetensorsFile file;
  struct Placed {
    std::size_t begin, end;
    SafetensorsTensor tensor;
    SafetensorsDtype dtype;
  };
  std::vector<Placed> placed;
  for (const auto& item : header.items()) {
    // Named copies: lambdas cannot capture structured bindings in C++17.
    const std::string name = item.key();
    const Json& entry = item.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) throw fail("__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) throw fail("__metadata__." + key + " is not a string");
        file.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    const auto bad = [&](const std::string& what) { return fail("tensor " + name + ": " + what); };
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets")) {
      throw bad("wants an object with dtype, shape and data_offsets");
    }
    const Json& dtype = entry["dtype"];
    if (!dtype.is_string()) throw bad("dtype is not a string");
    Placed p{0, 0, {}, SafetensorsDtype::f32};
    const std::string dtype_text = dtype.get<std::string>();
    if (dtype_text == "F32") {
      p.dtype = SafetensorsDtype::f32;
    } else if (dtype_text == "F16") {
      p.dtype = SafetensorsDtype::f16;
    } else if (dtype_text == "BF16") {
      p.dtype = SafetensorsDtype::bf16;
    } else {
      throw bad("dtype " + dtype_text + " is not one kgpt reads (F32, F16, BF16)");
    }
    const Json& shape = entry["shape"];
    if (!shape.is_array()) throw bad("shape is not a list");
    for (const Json& d : shape) {
      if (!d.is_number_unsigned()) throw bad("shape " + shape.dump() + " is not a list of sizes");
      p.tensor.shape.push_back(d.get<std::size_t>());
    }
    const Json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      throw bad("data_offsets " + offsets.dump() + " is not [begin, end]");
    }
    p.begin = offsets[0].get<std::size_t>();
    p.end = offsets[1].get<std::size_t>();
    if (p.begin > p.end || p.end > data_size) {
      throw bad("data_offsets [" + std::to_string(p.begin) + ", " + std::to_string(p.end) + "] lie outside the " +
                std::to_string(data_size) + " bytes of data");
    }
    std::size_t elements = 0;
    if (!product(p.tensor.shape, elements) || elements > (p.end - p.begin) / dtype_bytes(p.dtype) ||
        elements * dtype_bytes(p.dtype) != p.end - p.begin) {
      throw bad("shape " + shape.dump() + " of " + dtype_text + " does not fill its " + std::to_string(p.end - p.begin) +
                " bytes");
    }
    p.tensor.name = name;
    placed.push_back(std::move(p));
  }
  std::sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < placed.size(); ++i) {
    if (placed[i].begin < placed[i - 1].end) {
      throw fail("tensors " + placed[i - 1].tensor.name + " and " + placed[i].tensor.name + " overlap");
    }
  }
  if (!placed.empty()) file.dtype = placed.front().dtype;
  for (Placed& p : placed) {
    const std::size_t n = (p.end - p.begin) / dtype_bytes(p.dtype);
    p.tensor.values.resize(n);
    const unsigned char* at = data + data_begin + p.begin;
    for (std::size_t i = 0; i < n; ++i) p.tensor.values[i] = read_value(at + i * dtype_bytes(p.dtype), p.dtype);
    file.tensors.push_back(std::move(p.tensor));
  }
  return file;
}

}  // namespace kgpt::io
