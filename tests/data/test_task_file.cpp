// Multiple-choice task files (data/task_file.hpp) and their characters (inference/tasks.hpp).
#include <catch2/catch.hpp>

#include <string>

#include "core/error.hpp"
#include "data/task_file.hpp"
#include "inference/tasks.hpp"

using namespace kgpt;

TEST_CASE("task files: HellaSwag's lines are read, other fields ignored, blank lines skipped", "[data][task]") {
  const std::string text =
      "{\"ind\": 24, \"activity_label\": \"Roof shingle removal\", \"ctx_a\": \"A man is sitting on a roof.\", "
      "\"ctx_b\": \"he\", \"ctx\": \"A man is sitting on a roof. he\", \"split\": \"val\", \"endings\": [\"is using wrap "
      "to wrap a pair of skis.\", \"is ripping level tiles off.\", \"is holding a rubik's cube.\", \"starts pulling up "
      "roofing on a roof.\"], \"source_id\": \"activitynet~v_-JhWjGDPHMY\", \"split_type\": \"indomain\", \"label\": 3}\r\n"
      "\n   \n"
      "{\"ctx\": \"caf\\u00e9\", \"endings\": [\"a\", \"b\"], \"label\": \"1\"}\n";
  const auto examples = data::parse_task_text(text, "hs.jsonl");
  REQUIRE(examples.size() == 2);
  CHECK(examples[0].context == "A man is sitting on a roof. he");
  CHECK(examples[0].endings.size() == 4);
  CHECK(examples[0].endings[3] == "starts pulling up roofing on a roof.");
  CHECK(examples[0].label == 3);
  CHECK(examples[0].line == 1);
  CHECK(examples[1].context == "caf\xc3\xa9");
  CHECK(examples[1].label == 1);
  CHECK(examples[1].line == 4);
  CHECK(data::task_name("data/tasks/hellaswag_val.jsonl") == "hellaswag_val");
  CHECK(inference::utf8_characters(" caf\xc3\xa9") == 5);
}

TEST_CASE("task files: every bad line is named with its file and line", "[data][task]") {
  const auto problems = [](const std::string& text) {
    try {
      data::parse_task_text(text, "t.jsonl");
    } catch (const InputError& e) {
      return e.problems();
    }
    return std::vector<std::string>{};
  };
  const std::string good = "{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 0}\n";
  CHECK(problems(good).empty());
  const auto found = problems(good + "{\"ctx\": \"a\"\n" + good + "[1]\n{\"ctx\": 1, \"endings\": [\"b\", \"c\"], \"label\": 0}\n" +
                              "{\"ctx\": \"a\", \"endings\": \"bc\", \"label\": 0}\n" +
                              "{\"ctx\": \"a\", \"endings\": [\"b\"], \"label\": 0}\n" +
                              "{\"ctx\": \"a\", \"endings\": [\"b\", 3], \"label\": 0}\n" +
                              "{\"ctx\": \"a\", \"endings\": [\"b\", \"\"], \"label\": 0}\n" +
                              "{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 2}\n" +
                              "{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 0.5}\n" +
                              "{\"endings\": [\"b\", \"c\"], \"label\": 0}\n");
  REQUIRE(found.size() == 10);
  CHECK(found[0].rfind("t.jsonl:2: not JSON", 0) == 0);
  CHECK(found[1] == "t.jsonl:4: not a JSON object with ctx, endings and label");
  CHECK(found[2] == "t.jsonl:5: \"ctx\" is not a string");
  CHECK(found[3] == "t.jsonl:6: \"endings\" is not a list");
  CHECK(found[4] == "t.jsonl:7: \"endings\" holds 1 ending(s); a task needs at least 2");
  CHECK(found[5] == "t.jsonl:8: ending 1 is not a string");
  CHECK(found[6] == "t.jsonl:9: ending 1 is empty");
  CHECK(found[7] == "t.jsonl:10: \"label\" 2 is out of range: the endings are 0 to 1");
  CHECK(found[8] == "t.jsonl:11: \"label\" is not an integer");
  CHECK(found[9] == "t.jsonl:12: no \"ctx\" (the context)");
  // A file without an example, and one of many bad lines: 20 named, then how many more.
  CHECK(problems("\n\n").at(0).find("t.jsonl: no example") == 0);
  std::string many;
  for (int i = 0; i < 25; ++i) many += "x\n";
  const auto capped = problems(many);
  REQUIRE(capped.size() == 21);
  CHECK(capped.back() == "t.jsonl: and 5 more bad lines");
  // A missing file.
  CHECK_THROWS_AS(data::read_task_file("/nonexistent/task.jsonl"), InputError);
}
