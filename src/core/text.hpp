#pragma once
// Small text helpers shared by the deck reader and the command line.

#include <string>
#include <vector>

namespace kgpt::text {

// Levenshtein distance, for "did you mean" suggestions.
std::size_t edit_distance(const std::string& a, const std::string& b);

// The candidate closest to `word`, or "" when none is close enough to be a plausible typo.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

// Shortest decimal text that reads back as the same double ("0.04", not "0.040000000000000001").
std::string format_double(double value);

// Strict whole-string number parsing: no trailing junk, no empty string, no overflow.
bool parse_int64(const std::string& text, long long& value);
bool parse_double(const std::string& text, double& value);
// true/false, yes/no, on/off, any case.
bool parse_bool(const std::string& text, bool& value);

// A tensor's shape in messages and listings: "(1024, 384)", "(384)".
std::string shape(const std::vector<std::size_t>& dims);

// "1,234,567" for progress and summaries.
std::string with_thousands(unsigned long long value);

// Log and summary figures: six significant digits ("%.6g": 0.04, 1.23457e+06), or a fixed number of
// decimals ("%.*f").
std::string significant(double value);
std::string fixed(double value, int digits);

}  // namespace kgpt::text
