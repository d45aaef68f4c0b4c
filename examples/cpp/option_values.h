// Command-line values read whole: "1e4" is not the integer 1, "3x" is not 3, "" is not 0.
// A value that does not read as a whole number names its option (the programs exit 2).
#pragma once

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <c10/util/env.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace option_values {

// `value` read by `parse` (std::stoll or std::stod with its end position), all of it.
template <typename T, typename Parse>
T read_all(const std::string& option, const std::string& value, const char* kind, Parse parse) {
  size_t end = 0;
  T x{};
  try {
    x = parse(value, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  TORCH_CHECK_VALUE(!value.empty() && end == value.size(), option, " takes ", kind, ", got '",
                    value, "'");
  return x;
}

inline int64_t whole(const std::string& option, const std::string& value) {
  return read_all<int64_t>(option, value, "a whole number",
                           [](const std::string& s, size_t* end) { return std::stoll(s, end); });
}

// 0 or 1: "--split 7" had read as on, "--split yes" was refused as not a whole number.
inline bool flag(const std::string& option, const std::string& value) {
  TORCH_CHECK_VALUE(value == "0" || value == "1", option, " takes 0 or 1, got '", value, "'");
  return value == "1";
}

// A finite number: inf or nan would pass every range check and then loop or compare false.
inline double number(const std::string& option, const std::string& value) {
  const double x = read_all<double>(option, value, "a number",
                                    [](const std::string& s, size_t* end) { return std::stod(s, end); });
  TORCH_CHECK_VALUE(std::isfinite(x), option, " takes a finite number, got '", value, "'");
  return x;
}

// "15,10,5": comma-separated words, none empty ("15,10," is refused: std::getline would drop
// the empty last one).
inline std::vector<std::string> words(const std::string& option, const std::string& text) {
  std::vector<std::string> out;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) out.push_back(item);
  bool empty_item = text.empty() || text.back() == ',';
  for (const std::string& item : out) empty_item = empty_item || item.empty();
  TORCH_CHECK_VALUE(!empty_item, option, " takes a comma-separated list with no empty item, got '",
                    text, "'");
  return out;
}

inline std::vector<int64_t> wholes(const std::string& option, const std::string& text) {
  std::vector<int64_t> out;
  for (const std::string& word : words(option, text)) out.push_back(whole(option, word));
  return out;
}

// Errors without C++ stack traces unless TORCH_SHOW_CPP_STACKTRACES=1: an AOTInductor
// package logs each failed op's exception whole, and a bad id in run_exported's --inputs
// printed 40 lines of frames around its one-line message.
inline void quiet_stack_traces() {
  if (c10::utils::check_env("TORCH_SHOW_CPP_STACKTRACES") != true)  // (torch's own reading)
    c10::SetStackTraceFetcher(std::function<std::string()>([] { return std::string(); }));
}

}  // namespace option_values
