// The package's raw-file format (torch_quiver_ops.save_arrays / load_arrays) from C++:
// <name>.bin holds an array's bytes, <stem>.json names each array's dtype, shape and size
// and is written last. Shared by the C++ examples.
#pragma once

#include <ATen/ATen.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <charconv>
#include <optional>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
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

// A dtype as Python spells it (`torch.int32`), as the library's own messages name it (c10
// prints `Int`).
inline std::string dtype_name(at::ScalarType type) {
  return "torch." + c10::getDtypeNames(type).first;
}

// What the record says of one array.
struct Described {
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t nbytes = -1;
};

// Reads the record's JSON by hand, one pass, nesting bounded: std::regex recursed once per
// character it matched and overflowed the stack on a long record. Takes the entries of
// "arrays" ({"dtype", "shape", "nbytes", ...} each) and skips every other value.
class RecordReader {
 public:
  RecordReader(const std::string& text, std::string where) : text_(text), where_(std::move(where)) {}

  std::map<std::string, Described> arrays() {
    std::map<std::string, Described> found;
    bool saw_arrays = false;
    members(0, [&](const std::string& key) {
      if (key != "arrays") return other_entry(key);
      saw_arrays = true;
      members(1, [&](const std::string& name) {
        check_name(name);
        fail_unless(!found.count(name), "names array " + name + " twice");
        found[name] = described(name);
      });
    });
    space();
    fail_unless(at_ == text_.size(), "has text after its closing brace");
    fail_unless(saw_arrays, "has no \"arrays\" entry");
    return found;
  }

  // The record's top-level entries beside "arrays" (num_classes, say), by name: each
  // whole number's value, none for any other value.
  const std::map<std::string, std::optional<int64_t>>& integers() const { return integers_; }

 private:
  static constexpr int kMaxDepth = 64;

  [[noreturn]] void fail(const std::string& why) const {
    TORCH_CHECK(false, where_, " is not a whole record (cut short or not JSON): it ", why,
                " (at byte ", at_, ")");
  }
  void fail_unless(bool ok, const std::string& why) const {
    if (!ok) fail(why);
  }
  void space() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }
  bool next_is(char c) {
    space();
    return at_ < text_.size() && text_[at_] == c;
  }
  void expect(char c) {
    fail_unless(next_is(c), std::string("lacks a '") + c + "' where one belongs");
    ++at_;
  }

  // Reads the object or array opening with `open` here, calling `on_item()` for each of
  // its items (which must read it), at most kMaxDepth deep.
  template <typename OnItem>
  void items(int depth, char open, char close, OnItem&& on_item) {
    fail_unless(depth < kMaxDepth, "nests deeper than the format ever does");
    expect(open);
    if (next_is(close)) {
      ++at_;
      return;
    }
    while (true) {
      on_item();
      if (!next_is(',')) break;
      ++at_;
    }
    expect(close);
  }

  // Calls `on_member(key)` for each key of the object here, which must read its value.
  template <typename OnMember>
  void members(int depth, OnMember&& on_member) {
    items(depth, '{', '}', [&] {
      const std::string key = string();
      expect(':');
      on_member(key);
    });
  }

  // Calls `on_element()` for each element of the array here, which must read it.
  template <typename OnElement>
  void elements(int depth, OnElement&& on_element) {
    items(depth, '[', ']', on_element);
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      fail_unless(at_ < text_.size(), "ends inside a string");
      const char c = text_[at_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      fail_unless(at_ < text_.size(), "ends inside a string");
      const char escaped = text_[at_++];
      if (escaped == 'u') {
        fail_unless(at_ + 4 <= text_.size(), "ends inside a string");
        out += "\\u" + text_.substr(at_, 4);  // kept as written: no array name holds one
        at_ += 4;
      } else {
        out += escaped;
      }
    }
  }

  // Skips the spaces here, then tells where a whole number written there ends (an optional
  // '-', digits, no fraction or exponent after them): `at_` when none is.
  size_t whole_number_end() {
    space();
    size_t end = at_ < text_.size() && text_[at_] == '-' ? at_ + 1 : at_;
    const size_t digits = end;
    while (end < text_.size() && std::isdigit(static_cast<unsigned char>(text_[end]))) ++end;
    const bool whole =
        end > digits && (end == text_.size() || std::strchr(".eE", text_[end]) == nullptr);
    return whole ? end : at_;
  }

  int64_t integer(const std::string& what) {
    const size_t end = whole_number_end();  // (past the spaces before it)
    const size_t begin = at_;
    fail_unless(end > begin, "gives " + what + " as something other than an integer");
    at_ = end;
    int64_t value = 0;
    const auto [stop, error] = std::from_chars(text_.data() + begin, text_.data() + end, value);
    TORCH_CHECK(error == std::errc() && stop == text_.data() + end, where_, ": ", what, " ",
                text_.substr(begin, end - begin),
                " is past any file's size: the metadata is corrupt");
    return value;
  }

  // A top-level entry beside "arrays": its value kept when it is a whole number that fits
  // int64, else noted as none and skipped (Python's save_arrays takes any JSON there).
  void other_entry(const std::string& key) {
    const size_t end = whole_number_end();
    int64_t value = 0;
    if (end > at_ &&
        std::from_chars(text_.data() + at_, text_.data() + end, value).ec == std::errc()) {
      integers_[key] = value;
      at_ = end;
    } else {
      integers_[key] = std::nullopt;
      skip_value(1);
    }
  }

  void skip_value(int depth) {
    fail_unless(depth < kMaxDepth, "nests deeper than the format ever does");
    space();
    fail_unless(at_ < text_.size(), "ends where a value belongs");
    const char c = text_[at_];
    if (c == '{') {
      members(depth, [&](const std::string&) { skip_value(depth + 1); });
    } else if (c == '[') {
      elements(depth, [&] { skip_value(depth + 1); });
    } else if (c == '"') {
      string();
    } else {
      // A number, true, false or null: the characters they are written with.
      const size_t begin = at_;
      while (at_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[at_])) ||
                                    std::strchr("+-.", text_[at_]) != nullptr)) {
        ++at_;
      }
      fail_unless(at_ > begin, "holds a value that is not JSON");
    }
  }

  Described described(const std::string& name) {
    Described d;
    members(2, [&](const std::string& key) {
      if (key == "dtype") {
        d.dtype = string();
      } else if (key == "shape") {
        d.shape.clear();
        elements(3, [&] { d.shape.push_back(integer(name + "'s shape")); });
      } else if (key == "nbytes") {
        d.nbytes = integer(name + "'s nbytes");
      } else {
        skip_value(3);
      }
    });
    TORCH_CHECK(!d.dtype.empty() && d.nbytes >= 0, where_, " describes array ", name,
                " without a dtype or a non-negative nbytes: the metadata is corrupt");
    for (int64_t extent : d.shape) {
      TORCH_CHECK(extent >= 0, where_, " gives array ", name, " the shape ", at::IntArrayRef(d.shape),
                  ": the metadata is corrupt");
    }
    return d;
  }

  // As Python's save_arrays allows: letters, digits, '_', '.', '-', no "..", no path.
  void check_name(const std::string& name) const {
    bool plain = !name.empty() && name[0] != '.' && name[0] != '-' &&
                 name.find("..") == std::string::npos;
    for (char c : name) {
      plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-');
    }
    TORCH_CHECK(plain, where_, " names an array '", name,
                "', which is not a plain file name: the metadata is corrupt");
  }

  const std::string& text_;
  const std::string where_;
  size_t at_ = 0;
  std::map<std::string, std::optional<int64_t>> integers_;
};

// A record is a few KB, as Python's load_arrays holds (MAX_RECORD_BYTES): a far larger file
// is not one.
constexpr int64_t kMaxRecordBytes = int64_t{64} << 20;

// Maps every array of `directory/<stem>.json` (MAP_SHARED, no copy) after checking that
// each file holds exactly the bytes the record names, and that its dtype and shape do too.
// `integers`, when given, receives the record's top-level entries (RecordReader::integers).
inline std::map<std::string, at::Tensor> load_arrays(
    const fs::path& directory, const std::string& stem,
    std::map<std::string, std::optional<int64_t>>* integers = nullptr) {
  const fs::path record = directory / (stem + ".json");
  TORCH_CHECK(fs::exists(record), record.string(), " does not exist: nothing was saved in ",
              directory.string());
  TORCH_CHECK(fs::is_regular_file(record), record.string(), " is not a regular file: it cannot be a saved record");
  const auto record_bytes = static_cast<int64_t>(fs::file_size(record));
  TORCH_CHECK(record_bytes <= kMaxRecordBytes, record.string(), " holds ", record_bytes,
              " bytes, more than a record's ", kMaxRecordBytes, ": it is not one");
  std::ifstream file(record);
  TORCH_CHECK(file, record.string(), " could not be opened");
  const std::string json((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::map<std::string, at::Tensor> arrays;
  RecordReader reader(json, record.string());
  const auto described = reader.arrays();
  if (integers != nullptr) *integers = reader.integers();
  for (const auto& [name, info] : described) {
    const auto found = dtypes().find(info.dtype);
    TORCH_CHECK(found != dtypes().end(), record.string(), ": array ", name, " has dtype ",
                info.dtype, ", which this program does not read");
    const std::vector<int64_t>& shape = info.shape;
    const int64_t nbytes = info.nbytes;
    const fs::path path = directory / (name + ".bin");
    // (A missing file had read as "holds -1 bytes", a folder in std::filesystem's words.)
    TORCH_CHECK(fs::exists(path), path.string(), " is missing: ", record.string(), " names it");
    TORCH_CHECK(fs::is_regular_file(path), path.string(), " is not a regular file: ",
                record.string(), " names it as an array's bytes");
    const auto size = static_cast<int64_t>(fs::file_size(path));
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
                info.dtype, " ", at::IntArrayRef(shape), " but with nbytes ", nbytes,
                ": the metadata is corrupt");
    const auto options = at::TensorOptions().dtype(found->second);
    // Shared (one copy per machine, also once pinned); a read-only file maps privately.
    const bool writable = ::access(path.c_str(), W_OK) == 0;
    arrays[name] = count == 0 ? at::empty(shape, options)
                              : at::from_file(path.string(), writable, count, options).view(shape);
  }
  TORCH_CHECK(!arrays.empty(), record.string(), " names no arrays");
  return arrays;
}

inline at::Tensor require(const std::map<std::string, at::Tensor>& arrays, const std::string& name,
               const fs::path& where) {
  const auto found = arrays.find(name);
  TORCH_CHECK(found != arrays.end(), where.string(), " has no array '", name, "'");
  return found->second;
}

// Raises, naming `option`, unless `directory` is one `save_arrays` can write into: a
// folder, or a path whose nearest existing folder takes new entries. Checked before the
// work whose output it is, not after it; by making (and removing) a folder there, which
// answers for root too, whom access() lets write anywhere (/proc, say).
inline void check_writable_folder(const fs::path& directory, const std::string& option) {
  std::error_code ignored;
  fs::path existing = fs::absolute(directory, ignored);
  while (!fs::exists(existing, ignored) && existing.has_parent_path() &&
         existing != existing.parent_path())
    existing = existing.parent_path();
  TORCH_CHECK_VALUE(fs::is_directory(existing, ignored), option, " ", directory.string(),
                    ": ", existing.string(), " is not a folder");
  std::string probe = (existing / ".quiver-write-check-XXXXXX").string();
  TORCH_CHECK_VALUE(mkdtemp(probe.data()) != nullptr, option, " ", directory.string(),
                    ": nothing can be written in ", existing.string(), " (",
                    std::strerror(errno), ")");
  fs::remove(probe, ignored);
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
    TORCH_CHECK(!dtype.empty(), "save_arrays: array ", name, " has dtype ",
                dtype_name(t.scalar_type()), ", which the format does not name");
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
  std::ofstream partial_file(partial);
  partial_file << record.str();
  partial_file.close();
  TORCH_CHECK(partial_file.good(), "save_arrays: could not write ", partial.string());
  fs::rename(partial, directory / (stem + ".json"));
}

}  // namespace raw_arrays
