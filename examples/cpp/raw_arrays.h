// The package's raw-file format (torch_quiver_ops.save_arrays / load_arrays) from C++:
// <name>.bin holds an array's bytes, <stem>.json names each array's dtype, shape and size
// and is written last. Shared by the C++ examples.
#pragma once

#include <ATen/ATen.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace raw_arrays {

namespace fs = std::filesystem;

inline const std::map<std::string, at::ScalarType>& dtypes() {
  static const std::map<std::string, at::ScalarType> names{
      {"float32", at::kFloat}, {"float16", at::kHalf}, {"bfloat16", at::kBFloat16},
      {"float64", at::kDouble}, {"int64", at::kLong}, {"int32", at::kInt},
      {"int16", at::kShort}, {"int8", at::kChar}, {"uint8", at::kByte}, {"bool", at::kBool}};
  return names;
}

// Maps every array of `directory/<stem>.json` (MAP_SHARED, no copy) after checking that
// each file holds exactly the bytes the record names, and that its dtype and shape do too.
inline std::map<std::string, at::Tensor> load_arrays(const fs::path& directory, const std::string& stem) {
  const fs::path record = directory / (stem + ".json");
  std::ifstream file(record);
  TORCH_CHECK(file, record.string(), " does not exist: nothing was saved in ",
              directory.string());
  const std::string json((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  // {"name": {"dtype": "...", "shape": [...], "nbytes": N, ...}, ...}
  static const std::regex entry(
      R"re("(\w+)"\s*:\s*\{\s*"dtype"\s*:\s*"(\w+)"\s*,\s*"shape"\s*:\s*\[([0-9,\s]*)\]\s*,\s*"nbytes"\s*:\s*(\d+))re");
  // The record whole: a file cut short still holds the entries written before the cut, which
  // the pattern would take as the whole save.
  size_t last = json.find_last_not_of(" \t\r\n");
  int64_t depth = 0;
  bool balanced = true;
  for (char c : json) {
    depth += c == '{' ? 1 : c == '}' ? -1 : 0;
    balanced = balanced && depth >= 0;
  }
  // Each array's entry opens with its dtype; the caller's metadata comes after "arrays".
  static const std::regex entry_start(R"re(\{\s*"dtype"\s*:)re");
  const auto declared = static_cast<size_t>(std::distance(
      std::sregex_iterator(json.begin(), json.end(), entry_start), std::sregex_iterator()));
  TORCH_CHECK(last != std::string::npos && json[last] == '}' && balanced && depth == 0,
              record.string(), " is not a whole record (cut short or not JSON)");
  std::map<std::string, at::Tensor> arrays;
  size_t matched = 0;
  for (std::sregex_iterator it(json.begin(), json.end(), entry), end; it != end; ++it, ++matched) {
    const std::string name = (*it)[1], dtype = (*it)[2];
    const auto found = dtypes().find(dtype);
    TORCH_CHECK(found != dtypes().end(), record.string(), ": array ", name, " has dtype ", dtype,
                ", which this program does not read");
    std::vector<int64_t> shape;
    std::string dims = (*it)[3];
    for (char& c : dims) c = c == ',' ? ' ' : c;
    std::stringstream stream(dims);
    for (int64_t d; stream >> d;) shape.push_back(d);
    int64_t nbytes = 0;
    try {
      nbytes = std::stoll((*it)[4]);
    } catch (const std::out_of_range&) {
      TORCH_CHECK(false, record.string(), ": array ", name, " has nbytes ", (*it)[4].str(),
                  ", past any file's size: the metadata is corrupt");
    }
    const fs::path path = directory / (name + ".bin");
    const int64_t size = fs::exists(path) ? static_cast<int64_t>(fs::file_size(path)) : -1;
    TORCH_CHECK(size == nbytes, path.string(), " holds ", size, " bytes but ", record.string(),
                " says ", nbytes, ": the file is truncated or from another save");
    // The shape and dtype must account for the bytes exactly: mapping more would grow the
    // file on disk (zeros), fewer would reinterpret it.
    int64_t count = 1;
    bool overflow = false;
    for (int64_t d : shape) overflow |= __builtin_mul_overflow(count, d, &count);
    int64_t described = 0;
    overflow |= __builtin_mul_overflow(count, static_cast<int64_t>(c10::elementSize(found->second)),
                                       &described);
    TORCH_CHECK(!overflow && described == nbytes, record.string(), " describes ", name, ".bin as ",
                dtype, " ", at::IntArrayRef(shape), " but with nbytes ", nbytes,
                ": the metadata is corrupt");
    const auto options = at::TensorOptions().dtype(found->second);
    // Shared (one copy per machine, also once pinned); a read-only file maps privately.
    const bool writable = ::access(path.c_str(), W_OK) == 0;
    arrays[name] = count == 0 ? at::empty(shape, options)
                              : at::from_file(path.string(), writable, count, options).view(shape);
  }
  TORCH_CHECK(!arrays.empty(), record.string(), " names no arrays");
  TORCH_CHECK(matched == declared, record.string(), " declares ", declared, " arrays but ",
              matched, " of them read as {dtype, shape, nbytes}: the metadata is corrupt");
  return arrays;
}

inline at::Tensor require(const std::map<std::string, at::Tensor>& arrays, const std::string& name,
               const fs::path& where) {
  const auto found = arrays.find(name);
  TORCH_CHECK(found != arrays.end(), where.string(), " has no array '", name, "'");
  return found->second;
}

// Writes `arrays` as `load_arrays` (and Python's load_arrays) read them.
inline void save_arrays(const fs::path& directory, const std::string& stem,
                        const std::map<std::string, at::Tensor>& arrays) {
  fs::create_directories(directory);
  std::ostringstream record;
  record << "{\"arrays\": {";
  bool first = true;
  for (const auto& [name, array] : arrays) {
    const at::Tensor t = array.detach().to(at::kCPU).contiguous();
    std::string dtype;
    for (const auto& [label, type] : dtypes()) {
      if (type == t.scalar_type()) dtype = label;
    }
    TORCH_CHECK(!dtype.empty(), "save_arrays: array ", name, " has dtype ", t.scalar_type(),
                ", which the format does not name");
    std::ofstream file(directory / (name + ".bin"), std::ios::binary);
    file.write(static_cast<const char*>(t.const_data_ptr()), static_cast<std::streamsize>(t.nbytes()));
    TORCH_CHECK(file.good(), "save_arrays: could not write ", (directory / (name + ".bin")).string());
    record << (first ? "" : ", ") << "\"" << name << "\": {\"dtype\": \"" << dtype << "\", \"shape\": [";
    for (int64_t d = 0; d < t.dim(); ++d) record << (d ? ", " : "") << t.size(d);
    record << "], \"nbytes\": " << t.nbytes() << "}";
    first = false;
  }
  record << "}}";
  const fs::path partial = directory / (stem + ".json.partial");
  std::ofstream(partial) << record.str();
  fs::rename(partial, directory / (stem + ".json"));
}

}  // namespace raw_arrays
