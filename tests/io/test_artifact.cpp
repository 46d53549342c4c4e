// Model artifacts: the storage rules, every element's error within its storage's bound, the file
// read back to the same tensors, and truncated, corrupted or foreign files refused by name.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/error.hpp"
#include "core/fp16.hpp"
#include "core/random.hpp"
#include "support/temp_dir.hpp"
#include "io/artifact.hpp"
#include "model/family.hpp"

using namespace kgpt;
using io::ArtifactTensor;
using io::TensorStorage;

using model::Role;

namespace {

model::TensorSpec spec(const std::string& name, const std::vector<std::size_t>& shape, Role role) {
  model::TensorSpec s;
  s.name = name;
  s.shape = shape;
  s.role = role;
  return s;
}

std::vector<float> normal_values(std::size_t n, std::uint64_t stream, double scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * random::normal(9, stream, i));
  return v;
}

}  // namespace

TEST_CASE("tensors are stored by size and name as parameter-golf stores them", "[train][artifact]") {
  const auto small = normal_values(128 * 512, 1, 0.05);  // 65,536 elements: still kept in float
  CHECK(io::quantize_tensor(spec("blocks.0.attn.c_q.weight", {128, 512}, Role::attention), small.data()).storage == TensorStorage::fp16);
  const auto gains = normal_values(4, 2, 1.0);
  CHECK(io::quantize_tensor(spec("blocks.0.attn.q_gain", {4}, Role::control), gains.data()).storage == TensorStorage::fp32);
  CHECK(io::quantize_tensor(spec("blocks.3.resid_mix", {2, 4}, Role::control), gains.data()).storage == TensorStorage::fp32);
  CHECK(io::quantize_tensor(spec("skip_weights", {2, 2}, Role::control), gains.data()).storage == TensorStorage::fp32);
  const auto big = normal_values(130 * 512, 3, 0.05);
  const ArtifactTensor rows = io::quantize_tensor(spec("blocks.0.mlp.fc.weight", {130, 512}, Role::mlp), big.data());
  CHECK(rows.storage == TensorStorage::int8_rows);
  CHECK(rows.half.size() == 130);
  CHECK(rows.quantized.size() == big.size());
  CHECK(rows.stored_bytes() == 130 * 2 + big.size());
  const ArtifactTensor flat = io::quantize_tensor(spec("some.vector", {big.size()}, Role::projection), big.data());
  CHECK(flat.storage == TensorStorage::int8_tensor);
  CHECK(flat.single.size() == 1);
  // The role decides, not the name: SmearGate's gate is a control, a norm named like a control is not.
  CHECK(io::quantize_tensor(spec("smear_gate", {4}, Role::control), gains.data()).storage == TensorStorage::fp32);
  CHECK(io::quantize_tensor(spec("blocks.0.attn_scale", {4}, Role::norm), gains.data()).storage == TensorStorage::fp16);
  // A smaller limit sends the smaller tensor to int8 too.
  CHECK(io::quantize_tensor(spec("w", {128, 512}, Role::projection), small.data(), 1000).storage == TensorStorage::int8_rows);
}

TEST_CASE("every element comes back within its storage's error bound", "[train][artifact]") {
  for (const double scale : {0.02, 0.3, 3.0}) {  // rows below and above the 1/127 scale floor
    INFO("weights of scale " << scale);
    std::vector<float> w = normal_values(160 * 640, 4, scale);
    w[17] = static_cast<float>(40 * scale);  // an outlier the clip cuts
    const ArtifactTensor t = io::quantize_tensor(spec("blocks.1.mlp.proj.weight", {160, 640}, Role::mlp), w.data());
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
  const auto halves = io::quantize_tensor(spec("blocks.0.attn.c_k.weight", {10, 100}, Role::attention), small.data()).dequantized();
  for (std::size_t i = 0; i < small.size(); ++i) CHECK(std::fabs(halves[i] - small[i]) <= std::fabs(small[i]) * 4.9e-4 + 6e-8);
  const auto exact = io::quantize_tensor(spec("blocks.0.attn_scale", {1000}, Role::control), small.data()).dequantized();
  CHECK(exact == small);
}

TEST_CASE("an artifact file reads back to the same tensors, and damage is detected", "[train][artifact]") {
  test::TempDir dir;
  io::Artifact a;
  a.deck_text = "model:\n  family: golf\n";
  a.step = 1234;
  a.metadata = {{"kgpt_version", "0.1.0"}, {"run_dir", "/some/run"}};
  const auto big = normal_values(300 * 256, 6, 0.04), small = normal_values(64, 7, 1.0), flat = normal_values(70000, 8, 0.2);
  a.tensors.push_back(io::quantize_tensor(spec("tok_emb.weight", {300, 256}, Role::embedding), big.data()));
  a.tensors.push_back(io::quantize_tensor(spec("blocks.0.attn.q_gain", {64}, Role::control), small.data()));
  a.tensors.push_back(io::quantize_tensor(spec("blocks.0.norm", {64}, Role::norm), small.data()));
  a.tensors.push_back(io::quantize_tensor(spec("flat", {70000}, Role::projection), flat.data()));
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

namespace {

// Code i of a packed tensor, read bit by bit (least significant bit first), apart from the library's
// own unpacking.
unsigned packed_code(const std::vector<std::uint8_t>& bytes, std::size_t i, int bits) {
  unsigned code = 0;
  for (int b = 0; b < bits; ++b) {
    const std::size_t bit = i * static_cast<std::size_t>(bits) + static_cast<std::size_t>(b);
    code |= ((bytes.at(bit / 8) >> (bit % 8)) & 1u) << b;
  }
  return code;
}

// The squared error of a row stored with scale s (codes rounded half to even and clamped to +-R).
double row_error(const float* row, std::size_t columns, float s, int limit) {
  double error = 0;
  for (std::size_t c = 0; c < columns; ++c) {
    const double q = s > 0 ? std::min<double>(std::max<double>(std::nearbyint(row[c] / s), -limit), limit) : 0.0;
    const double e = row[c] - q * s;
    error += e * e;
  }
  return error;
}

io::Artifact sample_artifact(config::Compression compression) {
  io::Artifact a;
  a.deck_text = "model:\n  family: golf\n";
  a.step = 77;
  a.metadata = {{"kgpt_version", "0.1.0"}};
  a.compression = compression;
  const auto mlp = normal_values(96 * 700, 11, 0.04), attention = normal_values(70 * 1000, 12, 0.05);
  const auto embed = normal_values(300 * 256, 13, 0.02), gains = normal_values(8, 14, 1.0);
  a.tensors.push_back(io::quantize_tensor(spec("blocks.0.mlp.fc.weight", {96, 700}, Role::mlp), mlp.data(), io::kKeepFloatMaxElements, 5));
  a.tensors.push_back(io::quantize_tensor(spec("blocks.0.attn.c_q.weight", {70, 1000}, Role::attention), attention.data(), io::kKeepFloatMaxElements, 6));
  a.tensors.push_back(io::quantize_tensor(spec("tok_emb.weight", {300, 256}, Role::embedding), embed.data()));
  a.tensors.push_back(io::quantize_tensor(spec("blocks.0.attn.q_gain", {8}, Role::control), gains.data()));
  return a;
}

}  // namespace

TEST_CASE("4-7 bit rows: codes packed to their bits, each row's clip the least-error candidate", "[train][artifact]") {
  for (const int bits : {4, 5, 6, 7}) {
    INFO(bits << " bits");
    const int limit = (1 << (bits - 1)) - 1;
    const std::size_t rows = 40, columns = 1700;
    std::vector<float> w = normal_values(rows * columns, 20 + static_cast<std::uint64_t>(bits), 0.05);
    w[5] = 0.4f;                                                       // an outlier a lower clip cuts
    for (std::size_t c = 0; c < columns; ++c) w[3 * columns + c] = 0;  // a row of zeros
    for (std::size_t c = 0; c < columns; ++c) w[4 * columns + c] *= 1e-6f;  // below fp16's normal range
    const ArtifactTensor t = io::quantize_tensor(spec("blocks.1.mlp.proj.weight", {rows, columns}, Role::mlp), w.data(),
                                                 io::kKeepFloatMaxElements, bits);
    REQUIRE(t.storage == TensorStorage::packed_rows);
    CHECK(t.bits == bits);
    CHECK(t.storage_label() == "int" + std::to_string(bits) + " per row");
    CHECK(t.half.size() == rows);
    CHECK(t.packed.size() == (rows * columns * static_cast<std::size_t>(bits) + 7) / 8);
    CHECK(t.quantized.empty());
    CHECK(t.stored_bytes() == 2 * rows + t.packed.size());
    const std::vector<float> back = t.dequantized();
    for (std::size_t r = 0; r < rows; ++r) {
      INFO("row " << r);
      const float* row = w.data() + r * columns;
      const float s = half_to_float(t.half[r]);
      for (std::size_t c = 0; c < columns; ++c) {
        const unsigned code = packed_code(t.packed, r * columns + c, bits);
        REQUIRE(code <= static_cast<unsigned>(2 * limit));
        const float expected = static_cast<float>(static_cast<int>(code) - limit) * s;
        REQUIRE(back[r * columns + c] == expected);
        // Within half a step of the weight, unless the clip cut it.
        if (std::fabs(row[c]) <= s * static_cast<float>(limit)) REQUIRE(std::fabs(back[r * columns + c] - row[c]) <= 0.5 * s * (1 + 1e-6));
      }
      // No clip is better than the chosen one among the largest |w| and lower clips down to the
      // 99.9th percentile's.
      std::vector<float> magnitudes(columns);
      for (std::size_t c = 0; c < columns; ++c) magnitudes[c] = std::fabs(row[c]);
      std::sort(magnitudes.begin(), magnitudes.end());
      const double error = row_error(row, columns, s, limit);
      const double largest_clip_error = row_error(row, columns, half_to_float(float_to_half(magnitudes.back() / static_cast<float>(limit))), limit);
      CHECK(error <= largest_clip_error);
      // The outlier's row: at 4 and 5 bits cutting it costs less than the coarser step it needs.
      if (r == 0 && bits <= 5) CHECK(error < largest_clip_error);
    }
    for (std::size_t c = 0; c < columns; ++c) CHECK(back[3 * columns + c] == 0.0f);
  }
  // Bits apply to 2-D tensors above keep_float_max only.
  const auto v = normal_values(70000, 30, 0.1);
  CHECK(io::quantize_tensor(spec("flat", {70000}, Role::projection), v.data(), io::kKeepFloatMaxElements, 5).storage == TensorStorage::int8_tensor);
  CHECK(io::quantize_tensor(spec("blocks.0.mlp.fc.weight", {100, 600}, Role::mlp), v.data(), io::kKeepFloatMaxElements, 5).storage ==
        TensorStorage::fp16);
  CHECK(io::quantize_tensor(spec("w", {100, 700}, Role::projection), v.data(), io::kKeepFloatMaxElements, 8).storage == TensorStorage::int8_rows);
  CHECK_THROWS(io::quantize_tensor(spec("w", {100, 700}, Role::projection), v.data(), io::kKeepFloatMaxElements, 3));
}

TEST_CASE("planned tensors take the bytes of quantized ones, and the payload has a bound", "[train][artifact]") {
  const io::Artifact a = sample_artifact(config::Compression::zstd);
  io::Artifact planned = a;
  for (auto& t : planned.tensors) {
    const int bits = t.storage == TensorStorage::packed_rows ? t.bits : 8;
    t = io::planned_tensor(spec(t.name, t.shape, t.storage == TensorStorage::fp32 ? Role::control : Role::projection),
                            io::kKeepFloatMaxElements, bits);
  }
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    CHECK(planned.tensors[i].storage == a.tensors[i].storage);
    CHECK(planned.tensors[i].stored_bytes() == a.tensors[i].stored_bytes());
  }
  CHECK(io::payload_bytes(planned) == io::payload_bytes(a));
  for (const auto compression : {config::Compression::zlib, config::Compression::zstd}) {
    io::Artifact b = a;
    b.compression = compression;
    const std::string file = io::serialize_artifact(b);
    std::uint64_t declared = 0;
    std::memcpy(&declared, file.data() + 16, sizeof(declared));
    CHECK(declared == io::payload_bytes(b));
    CHECK(file.size() <= io::largest_file_bytes(io::payload_bytes(b), compression));
  }
}

TEST_CASE("zstd and brotli artifacts and version 1 files read back, and damage is refused by name", "[train][artifact]") {
  test::TempDir dir;
  for (const auto compression : {config::Compression::zlib, config::Compression::zstd, config::Compression::brotli}) {
    INFO(config::name_of(compression));
    const io::Artifact a = sample_artifact(compression);
    const std::string path = dir.file(std::string("model.") + config::name_of(compression));
    io::write_artifact(path, a);
    const std::string whole = test::read_file(path);
    CHECK(whole[8] == 2);                                                  // format version 2
    CHECK(whole[12] == static_cast<char>(compression));  // the compressor: zlib 0, zstd 1, brotli 2
    const io::Artifact b = io::read_artifact(path);
    CHECK(b.compression == compression);
    CHECK(b.step == 77);
    REQUIRE(b.tensors.size() == a.tensors.size());
    for (std::size_t i = 0; i < a.tensors.size(); ++i) {
      CHECK(b.tensors[i].storage == a.tensors[i].storage);
      CHECK(b.tensors[i].bits == a.tensors[i].bits);
      CHECK(b.tensors[i].dequantized() == a.tensors[i].dequantized());
    }
    test::write_file(dir.file("truncated"), whole.substr(0, whole.size() - 40));
    CHECK_THROWS_WITH(io::read_artifact(dir.file("truncated")), Catch::Contains("truncated or corrupted"));
  }
  const io::Artifact a = sample_artifact(config::Compression::zstd);
  const std::string zstd_file = io::serialize_artifact(a);

  // A file of version 1 (zlib, no packed rows) reads as before.
  io::Artifact old = sample_artifact(config::Compression::zlib);
  old.tensors.erase(old.tensors.begin(), old.tensors.begin() + 2);
  std::string v1 = io::serialize_artifact(old);
  v1[8] = 1;
  test::write_file(dir.file("v1"), v1);
  const io::Artifact read_v1 = io::read_artifact(dir.file("v1"));
  REQUIRE(read_v1.tensors.size() == 2);
  CHECK(read_v1.tensors[0].dequantized() == old.tensors[0].dequantized());
  // Version 1 knew neither zstd nor packed rows.
  std::string v1_zstd = zstd_file;
  v1_zstd[8] = 1;
  test::write_file(dir.file("v1_zstd"), v1_zstd);
  CHECK_THROWS_WITH(io::read_artifact(dir.file("v1_zstd")), Catch::Contains("names compressor 1"));
  std::string codec = zstd_file;
  codec[12] = 7;
  test::write_file(dir.file("codec"), codec);
  CHECK_THROWS_WITH(io::read_artifact(dir.file("codec")), Catch::Contains("names compressor 7"));
  // A 6-bit code above 2R = 62 is not one kgpt writes.
  io::Artifact bad = sample_artifact(config::Compression::zstd);
  std::fill(bad.tensors[1].packed.begin(), bad.tensors[1].packed.end(), 0xff);
  io::write_artifact(dir.file("bad_code"), bad);
  CHECK_THROWS_WITH(io::read_artifact(dir.file("bad_code")), Catch::Contains("malformed"));
  // A header declaring more payload than zstd can make of the file.
  std::string bomb = zstd_file;
  const std::uint64_t huge = std::uint64_t{1} << 39;
  std::memcpy(&bomb[16], &huge, sizeof(huge));
  test::write_file(dir.file("bomb"), bomb);
  CHECK_THROWS_WITH(io::read_artifact(dir.file("bomb")), Catch::Contains("compressed bytes can hold"));
  // brotli's output is grown as it comes: a header declaring more, or fewer, bytes than the stream
  // holds is refused, and nothing of the declared size is allocated first.
  const std::string brotli_file = io::serialize_artifact(sample_artifact(config::Compression::brotli));
  std::uint64_t size = 0;
  std::memcpy(&size, &brotli_file[16], sizeof(size));
  for (const std::uint64_t declared : {std::uint64_t{1} << 39, size + 1, size - 1, std::uint64_t{0}}) {
    INFO("declared " << declared << " of " << size);
    std::string lying = brotli_file;
    std::memcpy(&lying[16], &declared, sizeof(declared));
    test::write_file(dir.file("brotli_size"), lying);
    CHECK_THROWS_WITH(io::read_artifact(dir.file("brotli_size")), Catch::Contains("brotli: the stream is damaged"));
  }
  std::string damaged = brotli_file;
  damaged[40] = static_cast<char>(damaged[40] ^ 0x5a);
  test::write_file(dir.file("brotli_damaged"), damaged);
  CHECK_THROWS_AS(io::read_artifact(dir.file("brotli_damaged")), InputError);
  // The same payload as zstd's, smaller or not, read back the same.
  CHECK(io::read_artifact(dir.file("model.brotli")).deck_text == sample_artifact(config::Compression::zstd).deck_text);
}

TEST_CASE("every family's tensors fall in the export's weight groups", "[train][artifact]") {
  config::ExportConfig settings;
  settings.embed_bits = 7;
  settings.attention_bits = 6;
  settings.mlp_bits = 5;
  for (const model::Family* family : model::families()) {
    INFO(family->name);
    config::ModelConfig m;
    m.family = family->name;
    m.n_kv_head = family->defaults.n_kv_head == 0 ? m.n_head : m.n_kv_head;
    m.tie_embeddings = false;
    const model::ParameterLayout layout = family->layout(m, 64);
    std::size_t attention = 0, mlp = 0;
    for (const auto& entry : layout.entries()) {
      INFO(entry.spec.name << ", role " << model::role_name(entry.spec.role));
      const io::WeightGroup g = io::weight_group(entry.spec);
      switch (entry.spec.role) {
        case Role::embedding:
        case Role::head: CHECK(g == io::WeightGroup::embed); break;
        case Role::attention: CHECK(g == io::WeightGroup::attention); attention += 1; break;
        case Role::mlp: CHECK(g == io::WeightGroup::mlp); mlp += 1; break;
        case Role::projection:
        case Role::control:
        case Role::norm:
        case Role::bias: CHECK(g == io::WeightGroup::other); break;
      }
      // The blocks' matrices are the two roles the export gives their own bits.
      if (entry.spec.group() == model::ParamGroup::matrix && entry.spec.block >= 0) {
        CHECK(model::is_block_matrix(entry.spec.role));
      }
    }
    CHECK(attention >= static_cast<std::size_t>(m.n_layer));  // at least one attention matrix a block
    CHECK(mlp >= 2 * static_cast<std::size_t>(m.n_layer));    // at least two MLP matrices a block
  }
  CHECK(io::export_bits(io::WeightGroup::embed, settings) == 7);
  CHECK(io::export_bits(io::WeightGroup::attention, settings) == 6);
  CHECK(io::export_bits(io::WeightGroup::mlp, settings) == 5);
  CHECK(io::export_bits(io::WeightGroup::other, settings) == 8);
}

TEST_CASE("4-7 bit codes a byte each: the same values as packed, read back, and out-of-range codes refused",
          "[train][artifact]") {
  test::TempDir dir;
  const io::Artifact packed = sample_artifact(config::Compression::zstd);
  io::Artifact bytes = packed;
  for (auto& t : bytes.tensors) t = io::with_byte_codes(t);
  REQUIRE(bytes.tensors[0].storage == TensorStorage::byte_rows);
  REQUIRE(bytes.tensors[1].storage == TensorStorage::byte_rows);
  CHECK(bytes.tensors[2].storage == TensorStorage::int8_rows);  // 8-bit rows are left as they are
  for (std::size_t i = 0; i < packed.tensors.size(); ++i) {
    CHECK(bytes.tensors[i].dequantized() == packed.tensors[i].dequantized());
    CHECK(io::with_packed_codes(bytes.tensors[i]).packed == packed.tensors[i].packed);
  }
  CHECK(bytes.tensors[0].storage_label() == "int5 per row, a byte each");
  CHECK(bytes.tensors[0].stored_bytes() == 96 * 2 + 96 * 700);
  const std::string path = dir.file("bytes.int8z");
  io::write_artifact(path, bytes);
  const io::Artifact back = io::read_artifact(path);
  REQUIRE(back.tensors.size() == bytes.tensors.size());
  for (std::size_t i = 0; i < bytes.tensors.size(); ++i) {
    CHECK(back.tensors[i].storage == bytes.tensors[i].storage);
    CHECK(back.tensors[i].bits == bytes.tensors[i].bits);
    CHECK(back.tensors[i].dequantized() == packed.tensors[i].dequantized());
  }
  // A 5-bit code of 16, beyond R = 15.
  io::Artifact bad = bytes;
  bad.tensors[0].quantized[3] = 16;
  io::write_artifact(dir.file("bad"), bad);
  CHECK_THROWS_WITH(io::read_artifact(dir.file("bad")), Catch::Contains("malformed"));
}
