// tiktoken's BPE: the rank-file reader, GPT-2's encoder.json + vocab.bpe reader, and the encoder.
// The first byte picks what the rest is:
//   0: a rank file (one "BASE64 RANK" a line), read as gpt2's vocabulary and, when it reads, used
//      to encode and decode a fixed text;
//   1: GPT-2's pair: encoder.json, then after the first NUL byte vocab.bpe;
//   2-4: text, encoded with a small vocabulary under the split pattern of gpt2, cl100k_base or
//      o200k_base (any bytes: invalid UTF-8 is read as U+FFFD), with special tokens allowed for
//      odd second bytes; decoding must give back the text as it was read.
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "data/split_pattern.hpp"
#include "data/tiktoken.hpp"
#include "../support/base64.hpp"
#include "fuzz_input.hpp"

namespace {

using kgpt::test::base64;

void write(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
}

// The 256 bytes, a few dozen common pairs and words, and filler ranks up to the encoding's first
// special token, as a rank file.
std::string small_vocabulary(const std::string& encoding) {
  std::string text;
  int rank = 0;
  for (int b = 0; b < 256; ++b) text += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(rank++) + "\n";
  for (const char* token : {" t", "he", " a", "in", " the", "er", "on", " s", "an", "re", " w", "at", "en", "is",
                            "it", "or", " o", "ou", " c", "es", "ing", "  ", "    ", "\n\n", "ed", " th", "the",
                            "\xC3\xA9", "\xE2\x80", "\xE2\x80\x99", "'s", "12", "123", " 1"}) {
    text += base64(token) + " " + std::to_string(rank++) + "\n";
  }
  // Special tokens take the ids the encodings give them: pad the ranks up to below the first one.
  const int first_special = encoding == "gpt2" ? 50256 : encoding == "cl100k_base" ? 100257 : 199999;
  for (int k = 0; rank < first_special; ++k) text += base64("#" + std::to_string(k) + "#") + " " + std::to_string(rank++) + "\n";
  const std::string path = "/tmp/kgpt_fuzz_" + std::to_string(::getpid()) + "_" + encoding + ".tiktoken";
  write(path, text);
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const int mode = data[0] % 5;
  if (mode == 0) {
    const std::string path = kgpt::fuzz::as_file(data + 1, size - 1, ".tiktoken");
    kgpt::fuzz::expect_clear_refusal([&] {
      const auto t = kgpt::data::TiktokenTokenizer::load(path, "gpt2");
      const std::string text = "Fuzzed ranks encode this, and decode it back.\n";
      if (t.decode(t.encode(text)) != text) std::abort();
    });
    return 0;
  }
  if (mode == 1) {
    const std::string all(reinterpret_cast<const char*>(data + 1), size - 1);
    const auto nul = all.find('\0');
    const std::string encoder = all.substr(0, nul), merges = nul == std::string::npos ? "" : all.substr(nul + 1);
    const std::string dir = "/tmp/kgpt_fuzz_gpt2_" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    write(dir + "/vocab.bpe", merges);
    write(dir + "/encoder.json", encoder);
    kgpt::fuzz::expect_clear_refusal([&] { kgpt::data::TiktokenTokenizer::load(dir + "/encoder.json"); });
    return 0;
  }
  static const char* encodings[] = {"gpt2", "cl100k_base", "o200k_base"};
  const std::string encoding = encodings[mode - 2];
  static std::array<std::unique_ptr<kgpt::data::TiktokenTokenizer>, 3> loaded;
  auto& tokenizer = loaded[static_cast<std::size_t>(mode - 2)];
  if (!tokenizer) {
    tokenizer = std::make_unique<kgpt::data::TiktokenTokenizer>(
        kgpt::data::TiktokenTokenizer::load(small_vocabulary(encoding), encoding));
  }
  const bool allow_special = size > 1 && data[1] % 2 == 1;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::vector<int> ids = tokenizer->encode(text, allow_special);
  if (tokenizer->decode(ids) != kgpt::data::decode_utf8_replacing(text)) {
    std::fprintf(stderr, "fuzz: decode(encode(text)) is not the text (%s)\n", encoding.c_str());
    std::abort();
  }
  return 0;
}
