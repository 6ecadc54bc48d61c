#include "session/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

namespace actorflow {
namespace {

constexpr size_t kAlignment = 64;
constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
// numpy refuses headers beyond this by default (max_header_size); so do we.
constexpr size_t kMaxHeaderSize = 10000;

struct NpyType {
  DType dtype;
  const char* descr;      // as numpy writes it for a little-endian machine
  const char* alternate;  // another spelling of the same type numpy may write
};
constexpr std::array<NpyType, 6> kTypes{{{DType::kFloat32, "<f4", nullptr},
                                        {DType::kFloat64, "<f8", nullptr},
                                        {DType::kInt8, "|i1", "<i1"},
                                        {DType::kInt32, "<i4", nullptr},
                                        {DType::kInt64, "<i8", nullptr},
                                        {DType::kUInt8, "|u1", "<u1"}}};

std::string Errno() { return std::strerror(errno); }

// A tiny parser for the one Python literal a .npy header holds:
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
 public:
  explicit HeaderParser(const std::string& text) : text_(text) {}

  Status Parse(std::string* descr, bool* fortran_order, Shape* shape) {
    bool have_descr = false, have_order = false, have_shape = false;
    SkipSpace();
    if (!Eat('{')) return Error("expected '{'");
    while (true) {
      SkipSpace();
      if (Eat('}')) break;
      std::string key;
      AF_RETURN_IF_ERROR(String(&key));
      SkipSpace();
      if (!Eat(':')) return Error("expected ':' after '" + key + "'");
      SkipSpace();
      if (key == "descr" && !have_descr) {
        AF_RETURN_IF_ERROR(String(descr));
        have_descr = true;
      } else if (key == "fortran_order" && !have_order) {
        if (Word("True")) *fortran_order = true;
        else if (Word("False")) *fortran_order = false;
        else return Error("'fortran_order' must be True or False");
        have_order = true;
      } else if (key == "shape" && !have_shape) {
        AF_RETURN_IF_ERROR(Tuple(shape));
        have_shape = true;
      } else {
        return Error("unexpected or repeated key '" + key + "'");
      }
      SkipSpace();
      if (Eat(',')) continue;
      SkipSpace();
      if (Eat('}')) break;
      return Error("expected ',' or '}'");
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("trailing characters after the dictionary");
    if (!have_descr || !have_order || !have_shape) return Error("the dictionary needs 'descr', 'fortran_order' and 'shape'");
    return Status::Ok();
  }

 private:
  Status Error(const std::string& what) const {
    return InvalidArgument("bad header at character " + std::to_string(pos_) + ": " + what);
  }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n')) ++pos_;
  }
  bool Eat(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Word(const char* word) {
    const size_t n = std::strlen(word);
    if (text_.compare(pos_, n, word) != 0) return false;
    pos_ += n;
    return true;
  }
  Status String(std::string* out) {
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) return Error("expected a quoted string");
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == std::string::npos || end - pos_ > 64) return Error("unterminated or too long string");
    *out = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return Status::Ok();
  }
  Status Tuple(Shape* shape) {
    if (!Eat('(')) return Error("'shape' must be a tuple");
    shape->clear();
    while (true) {
      SkipSpace();
      if (Eat(')')) return Status::Ok();
      if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') return Error("expected a dimension");
      int64_t value = 0;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        if (value > (int64_t{1} << 48)) return Error("dimension too large");
        value = value * 10 + (text_[pos_++] - '0');
      }
      if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // written by Python 2
      shape->push_back(value);
      if (shape->size() > 32) return Error("more than 32 dimensions");
      SkipSpace();
      if (Eat(',')) continue;
      SkipSpace();
      if (Eat(')')) return Status::Ok();
      return Error("expected ',' or ')' in 'shape'");
    }
  }

  const std::string& text_;
  size_t pos_ = 0;
};

// The size in bytes `desc` needs, or an error when it overflows or passes `max_bytes`.
StatusOr<uint64_t> CheckedByteSize(const TensorDesc& desc, const std::string& what, uint64_t max_bytes) {
  AF_RETURN_IF_ERROR(ValidateTensorDesc(desc, what));
  unsigned __int128 bytes = DTypeSize(desc.dtype);
  for (int64_t d : desc.shape) {
    bytes *= static_cast<uint64_t>(d);
    if (bytes > max_bytes)
      return InvalidArgument(what + ": " + desc.ToString() + " is larger than the " + std::to_string(max_bytes) +
                             " bytes allowed");
  }
  return static_cast<uint64_t>(bytes);
}

}  // namespace

StatusOr<HostTensor> AllocateHostTensor(const TensorDesc& desc, const std::string& what, uint64_t max_bytes) {
  AF_ASSIGN_OR_RETURN(uint64_t bytes, CheckedByteSize(desc, what, max_bytes));
  const size_t rounded = (std::max<uint64_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) return Internal(what + ": out of memory for " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, rounded);
  return HostTensor{desc, std::shared_ptr<void>(p, [](void* q) { std::free(q); })};
}

std::string EncodeNpy(const TensorView& tensor) {
  const char* descr = "";
  for (const NpyType& t : kTypes)
    if (t.dtype == tensor.desc.dtype) descr = t.descr;
  std::string shape;  // as Python writes a tuple: "()", "(4,)", "(2, 3)"
  for (size_t i = 0; i < tensor.desc.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(tensor.desc.shape[i]);
  if (tensor.desc.shape.size() == 1) shape += ",";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + shape + "), }";
  // magic (6) + version (2) + length (2) + header + padding + '\n', a multiple of 64
  const size_t unpadded = kMagicSize + 4 + header.size() + 1;
  header.append((kAlignment - unpadded % kAlignment) % kAlignment, ' ');
  header.push_back('\n');
  std::string out(kMagic, kMagicSize);
  out.push_back(1);
  out.push_back(0);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  out.append(static_cast<const char*>(tensor.data), tensor.byte_size());
  return out;
}

StatusOr<HostTensor> DecodeNpy(const std::string& bytes, const std::string& what) {
  if (bytes.size() < kMagicSize + 4 || bytes.compare(0, kMagicSize, kMagic, kMagicSize) != 0)
    return InvalidArgument(what + ": not a .npy file (no \\x93NUMPY magic string)");
  const int major = static_cast<unsigned char>(bytes[6]), minor = static_cast<unsigned char>(bytes[7]);
  size_t header_size = 0, header_start = 0;
  if (major == 1 && minor == 0) {
    header_size = static_cast<unsigned char>(bytes[8]) | static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8;
    header_start = 10;
  } else if ((major == 2 || major == 3) && minor == 0 && bytes.size() >= 12) {
    for (int i = 3; i >= 0; --i) header_size = header_size << 8 | static_cast<unsigned char>(bytes[8 + i]);
    header_start = 12;
  } else {
    return InvalidArgument(what + ": unsupported .npy format version " + std::to_string(major) + "." +
                           std::to_string(minor) + " (1.0, 2.0 and 3.0 are read)");
  }
  if (header_size > kMaxHeaderSize || header_start + header_size > bytes.size())
    return InvalidArgument(what + ": the header length (" + std::to_string(header_size) +
                           ") runs past the end of the file or is too large (truncated?)");
  const std::string header = bytes.substr(header_start, header_size);
  for (char c : header)
    if (static_cast<unsigned char>(c) >= 0x80 || (c < ' ' && c != '\n'))
      return InvalidArgument(what + ": the header holds a non-printable character");
  std::string descr;
  bool fortran_order = false;
  Shape shape;
  Status parsed = HeaderParser(header).Parse(&descr, &fortran_order, &shape);
  if (!parsed.ok()) return parsed.WithContext(what);
  DType dtype = DType::kInvalid;
  for (const NpyType& t : kTypes)
    if (descr == t.descr || (t.alternate != nullptr && descr == t.alternate)) dtype = t.dtype;
  if (dtype == DType::kInvalid)
    return InvalidArgument(what + ": dtype '" + descr +
                           "' is not supported (float32 '<f4', float64 '<f8', int8 '|i1', int32 '<i4', int64 '<i8', "
                           "uint8 '|u1', little-endian)");
  if (fortran_order)
    return InvalidArgument(what + ": the array is in Fortran order; save a C-ordered copy (np.ascontiguousarray)");
  const TensorDesc desc{shape, dtype};
  const size_t data_start = header_start + header_size;
  AF_ASSIGN_OR_RETURN(uint64_t expected, CheckedByteSize(desc, what, bytes.size()));
  if (bytes.size() - data_start != expected)
    return InvalidArgument(what + ": holds " + std::to_string(bytes.size() - data_start) + " bytes of data, " +
                           desc.ToString() + " needs " + std::to_string(expected) + " (truncated or damaged)");
  AF_ASSIGN_OR_RETURN(HostTensor tensor, AllocateHostTensor(desc, what));
  if (expected > 0) std::memcpy(tensor.data.get(), bytes.data() + data_start, expected);
  return tensor;
}

StatusOr<std::string> ReadFile(const std::string& path, uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound("cannot open '" + path + "': " + Errno());
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return InvalidArgument("'" + path + "' is not a regular file");
  }
  if (static_cast<uint64_t>(info.st_size) > max_bytes) {
    ::close(fd);
    return InvalidArgument("'" + path + "' holds " + std::to_string(info.st_size) + " bytes, more than the " +
                           std::to_string(max_bytes) + " allowed");
  }
  std::string out(static_cast<size_t>(info.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? Errno() : "the file shrank while being read";
      ::close(fd);
      return InvalidArgument("cannot read '" + path + "': " + why);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return out;
}

Status WriteFileDurably(const std::string& path, const std::string& bytes, bool replace) {
  std::string target = path;
  if (replace) {
    std::random_device random;
    target = path + ".tmp-actorflow-" + std::to_string(::getpid()) + "-" + std::to_string(random());
  }
  const int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return InvalidArgument("cannot create '" + target + "': " + Errno());
  size_t done = 0;
  Status status;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = Internal("cannot write '" + target + "': " + Errno());
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (status.ok() && ::fsync(fd) != 0) status = Internal("cannot sync '" + target + "': " + Errno());
  if (::close(fd) != 0 && status.ok()) status = Internal("cannot close '" + target + "': " + Errno());
  if (status.ok() && replace && ::rename(target.c_str(), path.c_str()) != 0)
    status = Internal("cannot rename '" + target + "' to '" + path + "': " + Errno());
  if (!status.ok()) ::unlink(target.c_str());  // ours: created above with O_EXCL
  return status;
}

StatusOr<HostTensor> ReadNpyFile(const std::string& path) {
  AF_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return DecodeNpy(bytes, "'" + path + "'");
}

uint32_t Crc32(const std::string& bytes) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : bytes) crc = table[(crc ^ b) & 0xff] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

}  // namespace actorflow
