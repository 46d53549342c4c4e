#include "data/task_file.hpp"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace kgpt::data {

namespace {

constexpr std::size_t kMostProblems = 20;

// What is wrong with one line's example, or "" when it is one (filled into `example`).
std::string read_example(const std::string& text, TaskExample& example) {
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann says "[json.exception.parse_error.101] parse error at line 1, column 2: ...": the
    // line is always 1 here, the file's line is in the message already.
    const std::string what = e.what();
    const std::size_t column = what.find("column ");
    const std::size_t tail = what.find("] ");
    return "not JSON: " + (column != std::string::npos ? what.substr(column)
                                                        : tail == std::string::npos ? what : what.substr(tail + 2));
  }
  if (!value.is_object()) return "not a JSON object with ctx, endings and label";
  const auto ctx = value.find("ctx");
  if (ctx == value.end()) return "no \"ctx\" (the context)";
  if (!ctx->is_string()) return "\"ctx\" is not a string";
  const auto endings = value.find("endings");
  if (endings == value.end()) return "no \"endings\" (the candidate continuations)";
  if (!endings->is_array()) return "\"endings\" is not a list";
  if (endings->size() < 2) return "\"endings\" holds " + std::to_string(endings->size()) + " ending(s); a task needs at least 2";
  const auto label = value.find("label");
  if (label == value.end()) return "no \"label\" (the index of the right ending)";
  // HellaSwag's own files write the label as a number; some copies as a string of one.
  long long index = -1;
  if (label->is_number_integer()) {
    index = label->get<long long>();
  } else if (label->is_string() && !label->get<std::string>().empty() && label->get<std::string>().size() < 10 &&
             label->get<std::string>().find_first_not_of("0123456789") == std::string::npos) {
    index = std::stoll(label->get<std::string>());
  } else {
    return "\"label\" is not an integer";
  }
  if (index < 0 || index >= static_cast<long long>(endings->size())) {
    return "\"label\" " + std::to_string(index) + " is out of range: the endings are 0 to " +
           std::to_string(endings->size() - 1);
  }
  example.context = ctx->get<std::string>();
  example.endings.clear();
  for (std::size_t i = 0; i < endings->size(); ++i) {
    const nlohmann::json& ending = (*endings)[i];
    if (!ending.is_string()) return "ending " + std::to_string(i) + " is not a string";
    if (ending.get<std::string>().empty()) return "ending " + std::to_string(i) + " is empty";
    example.endings.push_back(ending.get<std::string>());
  }
  example.label = static_cast<int>(index);
  return "";
}

}  // namespace

std::vector<TaskExample> parse_task_text(const std::string& text, const std::string& name) {
  std::vector<TaskExample> examples;
  std::vector<std::string> problems;
  std::size_t more = 0;
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    TaskExample example;
    const std::string problem = read_example(line, example);
    if (!problem.empty()) {
      if (problems.size() < kMostProblems) {
        problems.push_back(name + ":" + std::to_string(number) + ": " + problem);
      } else {
        ++more;
      }
      continue;
    }
    example.line = number;
    examples.push_back(std::move(example));
  }
  if (more > 0) problems.push_back(name + ": and " + std::to_string(more) + " more bad lines");
  if (problems.empty() && examples.empty()) {
    problems.push_back(name + ": no example: a task file holds one JSON object a line, with ctx, endings and label");
  }
  if (!problems.empty()) throw InputError(problems);
  return examples;
}

std::vector<TaskExample> read_task_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot read the task file (missing or unreadable)");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(path + ": cannot read the task file");
  return parse_task_text(text.str(), path);
}

std::string task_name(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::size_t dot = name.find('.');
  if (dot != std::string::npos && dot > 0) name = name.substr(0, dot);
  return name;
}

}  // namespace kgpt::data
