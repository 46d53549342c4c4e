#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"

using namespace kgpt;

namespace {

std::string write_temp(const std::string& name, const std::string& bytes) {
  const std::string path = "safetensors_" + name + ".safetensors";
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

io::SafetensorsFile two_tensors(io::SafetensorsDtype dtype) {
  io::SafetensorsFile file;
  file.dtype = dtype;
  file.metadata = {{"format", "pt"}};
  file.tensors.push_back({"a.weight", {2, 3}, {1.0f, -2.5f, 3.25f, 1e-3f, 7.0f, -0.0f}});
  file.tensors.push_back({"b", {3}, {0.1f, 0.2f, 0.3f}});
  return file;
}

}  // namespace

TEST_CASE("safetensors: F32 round-trips exactly, with 8-byte aligned data and the metadata", "[io][safetensors]") {
  const std::string bytes = io::serialize_safetensors(two_tensors(io::SafetensorsDtype::f32));
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  CHECK((8 + header) % 8 == 0);
  CHECK(bytes.size() == 8 + header + 9 * 4);
  const io::SafetensorsFile back = io::read_safetensors(write_temp("f32", bytes));
  REQUIRE(back.tensors.size() == 2);
  CHECK(back.metadata.at("format") == "pt");
  CHECK(back.tensors[0].name == "a.weight");
  CHECK(back.tensors[0].shape == std::vector<std::size_t>{2, 3});
  CHECK(back.tensors[0].values == two_tensors(io::SafetensorsDtype::f32).tensors[0].values);
  CHECK(back.tensors[1].values == two_tensors(io::SafetensorsDtype::f32).tensors[1].values);
  CHECK(back.dtype == io::SafetensorsDtype::f32);
}

TEST_CASE("safetensors: BF16 stores each value rounded to nearest even", "[io][safetensors]") {
  const io::SafetensorsFile back =
      io::read_safetensors(write_temp("bf16", io::serialize_safetensors(two_tensors(io::SafetensorsDtype::bf16))));
  REQUIRE(back.tensors.size() == 2);
  CHECK(back.dtype == io::SafetensorsDtype::bf16);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(back.tensors[1].values[i] == static_cast<float>(bf16(two_tensors(io::SafetensorsDtype::f32).tensors[1].values[i])));
  }
  CHECK(back.tensors[1].values[0] != 0.1f);  // 0.1 is not a bf16 value
}

TEST_CASE("safetensors: a file whose header lies is refused with the file and the tensor named", "[io][safetensors]") {
  const auto header_of = [](const std::string& json) {
    std::string out;
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((json.size() >> (8 * i)) & 0xffu));
    return out + json;
  };
  const std::string overlap =
      header_of(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})") +
      std::string(8, '\0');
  CHECK_THROWS_WITH(io::read_safetensors(write_temp("overlap", overlap)), Catch::Contains("overlap"));
  const std::string negative = header_of(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})") + std::string(8, '\0');
  CHECK_THROWS_WITH(io::read_safetensors(write_temp("negative", negative)), Catch::Contains("tensor x: shape"));
  const std::string list = header_of(R"([1,2,3])");
  CHECK_THROWS_WITH(io::read_safetensors(write_temp("list", list)), Catch::Contains("not a JSON object"));
  const std::string overflow =
      header_of(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})") + std::string(8, '\0');
  CHECK_THROWS_WITH(io::read_safetensors(write_temp("overflow", overflow)), Catch::Contains("does not fill"));
  CHECK_THROWS_WITH(io::read_safetensors("no_such.safetensors"), Catch::Contains("no_such.safetensors: cannot open"));
  CHECK_THROWS_AS(io::read_safetensors(write_temp("list2", list)), InputError);
}
