// The .npy reader and writer: round trips of every dtype, the header spellings numpy writes,
// and every kind of damage refused with a message naming the file (a fuzz loop over headers).
#include "session/npy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace actorflow {
namespace {

std::string Npy(const std::string& header_dict, const std::string& data, int major = 1) {
  std::string header = header_dict;
  const size_t prefix = major == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  const size_t n = header.size();
  out += static_cast<char>(n & 0xff);
  out += static_cast<char>((n >> 8) & 0xff);
  if (major != 1) out += std::string(2, '\0');
  return out + header + data;
}

std::string Bytes(const void* data, size_t n) { return std::string(static_cast<const char*>(data), n); }

TEST(NpyTest, RoundTripsEveryDtypeAndShape) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kInt32, DType::kInt64, DType::kUInt8}) {
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{5}, Shape{2, 3}, Shape{1, 2, 3, 4}}) {
      TensorDesc desc{shape, dtype};
      HostTensor tensor = AllocateHostTensor(desc, "t").value();
      for (size_t i = 0; i < desc.byte_size(); ++i) static_cast<unsigned char*>(tensor.data.get())[i] = static_cast<unsigned char>(i * 7 + 1);
      const std::string bytes = EncodeNpy(tensor.view());
      EXPECT_EQ(bytes.size() % 64, desc.byte_size() % 64) << "the header is padded to 64 bytes";
      auto decoded = DecodeNpy(bytes, "t.npy");
      ASSERT_TRUE(decoded.ok()) << decoded.status().message();
      EXPECT_EQ(decoded->desc, desc);
      EXPECT_EQ(std::memcmp(decoded->data.get(), tensor.data.get(), desc.byte_size()), 0);
    }
  }
}

TEST(NpyTest, ReadsTheSpellingsNumpyWrites) {
  const float values[6] = {1, 2, 3, 4, 5, 6};
  auto a = DecodeNpy(Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", Bytes(values, 24)), "a");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->desc, (TensorDesc{{2, 3}, DType::kFloat32}));
  EXPECT_EQ(static_cast<float*>(a->data.get())[5], 6.f);
  auto v2 = DecodeNpy(Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", Bytes(values, 24), 2), "v2");
  ASSERT_TRUE(v2.ok()) << v2.status().message();
  EXPECT_EQ(v2->desc.shape, (Shape{6}));
  const int8_t small[2] = {-1, 1};
  auto i8 = DecodeNpy(Npy("{'shape': (2,), 'fortran_order': False, 'descr': '|i1'}", Bytes(small, 2)), "i8");
  ASSERT_TRUE(i8.ok()) << i8.status().message();
  EXPECT_EQ(i8->desc.dtype, DType::kInt8);
  auto scalar = DecodeNpy(Npy("{'descr': '<i8', 'fortran_order': False, 'shape': (), }", std::string(8, '\1')), "s");
  ASSERT_TRUE(scalar.ok()) << scalar.status().message();
  EXPECT_TRUE(scalar->desc.shape.empty());
}

TEST(NpyTest, RefusesWhatItCannotReadExactly) {
  const std::string data(24, '\0');
  struct Case {
    std::string bytes, expected;
  };
  const std::vector<Case> cases = {
      {"not numpy at all", "not a .npy file"},
      {Npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", data), "Fortran order"},
      {Npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", data), "dtype '>f4' is not supported"},
      {Npy("{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", data), "dtype '<c8'"},
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data.substr(0, 20)), "holds 20 bytes of data"},
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data + "x"), "holds 25 bytes of data"},
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", data), "unexpected or repeated key 'x'"},
      {Npy("{'descr': '<f4', 'shape': (2, 3), }", data), "needs 'descr', 'fortran_order' and 'shape'"},
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", data), "expected a dimension"},
      // A forged shape far larger than the file: refused before any allocation.
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000, 100000), }", data), "larger than"},
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data, 4), "unsupported .npy format version 4.0"},
      {std::string("\x93NUMPY\x01\x00\xff\x7f{", 11), "runs past the end"},
  };
  for (const Case& c : cases) {
    auto decoded = DecodeNpy(c.bytes, "file 'x.npy'");
    ASSERT_FALSE(decoded.ok()) << c.expected;
    EXPECT_NE(decoded.status().message().find(c.expected), std::string::npos) << decoded.status().message();
    EXPECT_NE(decoded.status().message().find("file 'x.npy'"), std::string::npos) << decoded.status().message();
  }
}

TEST(NpyTest, DamagedBytesNeverCrashFuzz) {
  const float values[6] = {1, 2, 3, 4, 5, 6};
  const std::string good = Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", Bytes(values, 24));
  std::mt19937 random(7);
  int refused = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes = good;
    if (trial % 4 == 0) bytes.resize(random() % good.size());
    const int changes = 1 + static_cast<int>(random() % 3);
    for (int c = 0; c < changes && !bytes.empty(); ++c) bytes[random() % std::min<size_t>(bytes.size(), 90)] = static_cast<char>(random());
    auto decoded = DecodeNpy(bytes, "f");
    if (!decoded.ok()) {
      ++refused;
      continue;
    }
    // What is accepted is self-consistent: the data is exactly what the shape says.
    EXPECT_EQ(decoded->desc.byte_size(), 24u);
  }
  EXPECT_GT(refused, 10000);
}

TEST(NpyTest, Crc32MatchesZlib) {
  EXPECT_EQ(Crc32(""), 0u);
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);  // the standard check value
}

}  // namespace
}  // namespace actorflow
