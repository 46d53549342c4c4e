#include <catch2/catch.hpp>

#include <limits>

#include "core/text.hpp"

using namespace kgpt::text;

TEST_CASE("edit distance and suggestions", "[core][text]") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("d_model", "dmodel") == 1);
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(closest_match("dmodel", {"d_model", "n_head", "vocab_size"}) == "d_model");
  CHECK(closest_match("gtp2", {"golf", "gpt2"}) == "gpt2");
  CHECK(closest_match("completely_unrelated", {"seq_len", "seed"}).empty());
}

TEST_CASE("strict number parsing", "[core][text]") {
  long long i = 0;
  CHECK(parse_int64("524288", i));
  CHECK(i == 524288);
  CHECK(parse_int64("-3", i));
  CHECK(i == -3);
  for (const char* bad : {"", " 1", "1 ", "1.0", "1e3", "12abc", "0x10", "99999999999999999999"}) {
    INFO(bad);
    CHECK_FALSE(parse_int64(bad, i));
  }
  double d = 0;
  CHECK(parse_double("0.04", d));
  CHECK(d == 0.04);
  CHECK(parse_double("1e-8", d));
  CHECK(d == 1e-8);
  for (const char* bad : {"", "fast", "1.0.0", "nan", "inf", "1e999"}) {
    INFO(bad);
    CHECK_FALSE(parse_double(bad, d));
  }
  bool b = false;
  CHECK(parse_bool("Yes", b));
  CHECK(b);
  CHECK(parse_bool("off", b));
  CHECK_FALSE(b);
  CHECK_FALSE(parse_bool("2", b));
}

TEST_CASE("doubles print short and read back exactly", "[core][text]") {
  CHECK(format_double(0.04) == "0.04");
  CHECK(format_double(1e-8) == "1e-08");
  CHECK(format_double(30.0) == "30.0");
  for (double v : {0.1, 1.0 / 3.0, 6.02214076e23, std::numeric_limits<double>::min()}) {
    double back = 0;
    REQUIRE(parse_double(format_double(v), back));
    CHECK(back == v);
  }
  CHECK(with_thousands(0) == "0");
  CHECK(with_thousands(1234567) == "1,234,567");
}

TEST_CASE("log figures: six significant digits or fixed decimals", "[core][text]") {
  CHECK(significant(0.04) == "0.04");
  CHECK(significant(1234567.0) == "1.23457e+06");
  CHECK(significant(600) == "600");
  CHECK(fixed(3.85661234, 4) == "3.8566");
  CHECK(fixed(2.5, 6) == "2.500000");
}
