#pragma once
// Multiple-choice task files (kgpt eval --task, data.task_files): JSON Lines in HellaSwag's format,
// one example a line,
//   {"ctx": "A man is sitting on a roof. He", "endings": ["starts pulling up roofing.", ...], "label": 0}
// ctx the context, endings the candidate continuations (at least two, none empty), label the index
// of the right one. Other fields (HellaSwag's ctx_a, ctx_b, activity_label, ...) are ignored; blank
// lines are skipped. Each problem is an InputError naming the file and its line.

#include <string>
#include <vector>

namespace kgpt::data {

struct TaskExample {
  std::string context;
  std::vector<std::string> endings;
  int label = 0;
  int line = 0;  // the file's line it came from, from 1
};

// The examples of the file at `path`; throws InputError (exit code 2) naming the file and every
// bad line (up to 20 of them): not JSON, not an object, a missing field or one of the wrong type, a
// label out of range, an empty ending, fewer than two endings; or a file with no example.
std::vector<TaskExample> read_task_file(const std::string& path);

// The same from text already read; `name` is what messages call it.
std::vector<TaskExample> parse_task_text(const std::string& text, const std::string& name);

// The task's name: the file's name without its folder and its extension ("hellaswag_val").
std::string task_name(const std::string& path);

}  // namespace kgpt::data
