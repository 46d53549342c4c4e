// Model artifacts: the storage rules, every element's error within its storage's bound, the file
// read back to the same tensors, and truncated, corrupted or foreign files refused by name.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "core/error.hpp"
#include "core/fp16.hpp"
#include "core/random.hpp"
#include "support/temp_dir.hpp"
#include "io/artifact.hpp"

using namespace kgpt;
using io::ArtifactTensor;
using io::TensorStorage;

namespace {

std::vector<float> normal_values(std::size_t n, std::uint64_t stream, double scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * random::normal(9, stream, i));
  return v;
}

}  // namespace

TEST_CASE("tensors are stored by size and name as parameter-golf stores them", "[train][artifact]") {
  const auto small = normal_values(128 * 512, 1, 0.05);  // 65,536 elements: still kept in float
  CHECK(io::quantize_tensor("blocks.0.attn.c_q.weight", {128, 512}, small.data()).storage == TensorStorage::fp16);
  const auto gains = normal_values(4, 2, 1.0);
  CHECK(io::quantize_tensor("blocks.0.attn.q_gain", {4}, gains.data()).storage == TensorStorage::fp32);
  CHECK(io::quantize_tensor("blocks.3.resid_mix", {2, 4}, gains.data()).storage == TensorStorage::fp32);
  CHECK(io::quantize_tensor("skip_weights", {2, 2}, gains.data()).storage == TensorStorage::fp32);
  const auto big = normal_values(130 * 512, 3, 0.05);
  const ArtifactTensor rows = io::quantize_tensor("blocks.0.mlp.fc.weight", {130, 512}, big.data());
  CHECK(rows.storage == TensorStorage::int8_rows);
  CHECK(rows.half.size() == 130);
  CHECK(rows.quantized.size() == big.size());
  CHECK(rows.stored_bytes() == 130 * 2 + big.size());
  const ArtifactTensor flat = io::quantize_tensor("some.vector", {big.size()}, big.data());
  CHECK(flat.storage == TensorStorage::int8_tensor);
  CHECK(flat.single.size() == 1);
  // A smaller limit sends the smaller tensor to int8 too.
  CHECK(io::quantize_tensor("w", {128, 512}, small.data(), 1000).storage == TensorStorage::int8_rows);
}

TEST_CASE("every element comes back within its storage's error bound", "[train][artifact]") {
  for (const double scale : {0.02, 0.3, 3.0}) {  // rows below and above the 1/127 scale floor
    INFO("weights of scale " << scale);
    std::vector<float> w = normal_values(160 * 640, 4, scale);
    w[17] = static_cast<float>(40 * scale);  // an outlier the clip cuts
    const ArtifactTensor t = io::quantize_tensor("blocks.1.mlp.proj.weight", {160, 640}, w.data());
    REQUIRE(t.storage == TensorStorage::int8_rows);
    const std::vector<float> back = t.dequantized();
    std::size_t clipped = 0;
    for (std::size_t r = 0; r < 160; ++r) {
      std::vector<float> magnitudes(640);
      for (std::size_t c = 0; c < 640; ++c) magnitudes[c] = std::fabs(w[r * 640 + c]);
      std::sort(magnitudes.begin(), magnitudes.end());
      // The clip is the 99.99984th percentile of the row's 640 magnitudes: torch.quantile's linear
      // interpolation at 0.9999984 * 639, between the two largest.
      const double position = 0.9999984 * 639.0;
      const double clip = magnitudes[638] + (magnitudes[639] - magnitudes[638]) * (position - 638.0);
      const double scale_used = std::max(clip / 127.0, 1.0 / 127.0);
      const float stored_scale = half_to_float(t.half[r]);
      CHECK(std::fabs(stored_scale - scale_used) <= scale_used * std::ldexp(1.0, -11));
      // Rounding to the step (half a step) plus the fp16 rounding of the scale, times |q| <= 127.
      const double bound = 0.5 * scale_used * (1 + 1e-6) + 127.0 * std::fabs(stored_scale - scale_used) + 1e-7;
      const double clip_low = clip * (1 - 1e-6);
      for (std::size_t c = 0; c < 640; ++c) {
        const std::size_t i = r * 640 + c;
        CHECK(std::abs(static_cast<int>(t.quantized[i])) <= 127);
        if (std::fabs(w[i]) > clip_low) {
          ++clipped;
          continue;
        }
        if (std::fabs(back[i] - w[i]) > bound) FAIL("element " << i << ": " << w[i] << " -> " << back[i] << ", bound " << bound);
      }
    }
    CHECK(clipped <= 160);  // at most the largest of each row
  }
  // fp16: relative error 2^-11; fp32: exact.
  const auto small = normal_values(1000, 5, 0.1);
  const auto halves = io::quantize_tensor("blocks.0.attn.c_k.weight", {10, 100}, small.data()).dequantized();
  for (std::size_t i = 0; i < small.size(); ++i) CHECK(std::fabs(halves[i] - small[i]) <= std::fabs(small[i]) * 4.9e-4 + 6e-8);
  const auto exact = io::quantize_tensor("blocks.0.attn_scale", {1000}, small.data()).dequantized();
  CHECK(exact == small);
}

TEST_CASE("an artifact file reads back to the same tensors, and damage is detected", "[train][artifact]") {
  test::TempDir dir;
  io::Artifact a;
  a.deck_text = "model:\n  family: golf\n";
  a.step = 1234;
  a.metadata = {{"kgpt_version", "0.1.0"}, {"run_dir", "/some/run"}};
  const auto big = normal_values(300 * 256, 6, 0.04), small = normal_values(64, 7, 1.0), flat = normal_values(70000, 8, 0.2);
  a.tensors.push_back(io::quantize_tensor("tok_emb.weight", {300, 256}, big.data()));
  a.tensors.push_back(io::quantize_tensor("blocks.0.attn.q_gain", {64}, small.data()));
  a.tensors.push_back(io::quantize_tensor("blocks.0.norm", {64}, small.data()));
  a.tensors.push_back(io::quantize_tensor("flat", {70000}, flat.data()));
  const std::string path = dir.file("model.int8z");
  const std::size_t bytes = io::write_artifact(path, a);
  CHECK(bytes == test::read_file(path).size());
  CHECK(io::is_artifact_file(path));
  const io::Artifact b = io::read_artifact(path);
  CHECK(b.deck_text == a.deck_text);
  CHECK(b.step == 1234);
  CHECK(b.metadata == a.metadata);
  REQUIRE(b.tensors.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(b.tensors[i].name == a.tensors[i].name);
    CHECK(b.tensors[i].shape == a.tensors[i].shape);
    CHECK(b.tensors[i].storage == a.tensors[i].storage);
    CHECK(b.tensors[i].dequantized() == a.tensors[i].dequantized());
  }
  // zlib at level 9 shrinks int8 weights of a normal distribution below their raw bytes.
  std::size_t raw = 0;
  for (const auto& t : a.tensors) raw += t.stored_bytes();
  CHECK(bytes < raw);

  const std::string whole = test::read_file(path);
  test::write_file(dir.file("truncated"), whole.substr(0, whole.size() / 2));
  CHECK_THROWS_WITH(io::read_artifact(dir.file("truncated")), Catch::StartsWith(dir.file("truncated") + ": the artifact is truncated or corrupted"));
  test::write_file(dir.file("header_only"), whole.substr(0, 20));
  CHECK_THROWS_WITH(io::read_artifact(dir.file("header_only")), Catch::Contains("truncated"));
  std::string flipped = whole;
  flipped[flipped.size() / 2] = static_cast<char>(flipped[flipped.size() / 2] ^ 0x10);
  test::write_file(dir.file("flipped"), flipped);
  CHECK_THROWS_AS(io::read_artifact(dir.file("flipped")), InputError);
  test::write_file(dir.file("foreign"), "PK\x03\x04 something else entirely");
  CHECK_FALSE(io::is_artifact_file(dir.file("foreign")));
  CHECK_THROWS_WITH(io::read_artifact(dir.file("foreign")), Catch::Contains("not a kgpt artifact"));
  CHECK_THROWS_WITH(io::read_artifact(dir.file("absent")), Catch::StartsWith(dir.file("absent") + ": cannot open"));
  std::string future = whole;
  future[8] = 9;  // format version 9
  test::write_file(dir.file("future"), future);
  CHECK_THROWS_WITH(io::read_artifact(dir.file("future")), Catch::Contains("format version 9"));
}
