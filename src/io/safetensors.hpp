#pragma once
// safetensors files (the format Hugging Face's libraries read and write), kgpt's own reader and
// writer. A file is:
//   8 bytes      N, the header's length, unsigned little-endian
//   N bytes      a JSON object: for each tensor {"dtype": "F32"|"F16"|"BF16", "shape": [...],
//                "data_offsets": [begin, end]} (offsets into the data that follows), and an optional
//                "__metadata__" object of strings
//   the data     every tensor's bytes, little-endian, row-major, back to back
// kgpt writes the header padded with spaces so the data starts 8-byte aligned, the tensors in the
// order given, and F32 or BF16 values. It reads F32, F16 and BF16 into float; any other dtype, an
// offset outside the data, a size that does not match the shape, overlapping tensors or a header that
// is not such a JSON object is an InputError naming the file (and the tensor).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kgpt::io {

enum class SafetensorsDtype { f32, f16, bf16 };
const char* dtype_name(SafetensorsDtype dtype);  // "F32", "F16", "BF16"

struct SafetensorsTensor {
  std::string name;
  std::vector<std::size_t> shape;
  std::vector<float> values;  // row-major; written in the file's dtype (rounded to nearest even)
  std::size_t elements() const;
};

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsTensor> tensors;  // in the order of their data
  SafetensorsDtype dtype = SafetensorsDtype::f32;  // what write_safetensors stores
};

// The bytes of a file holding `file`'s tensors in `file.dtype` (F32 or BF16).
std::string serialize_safetensors(const SafetensorsFile& file);
// Reads and checks a whole file; `dtype` of the result is that of its first tensor.
SafetensorsFile read_safetensors(const std::string& path);
// The same in two parts, for callers that also need the file's bytes (a checksum): the bytes of the
// file at `path`, and the check of bytes read from `path` (named in messages).
std::string read_safetensors_bytes(const std::string& path);
SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& path);

}  // namespace kgpt::io
