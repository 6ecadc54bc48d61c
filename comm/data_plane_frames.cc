#include "comm/data_plane_frames.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace actorflow {

namespace {

[[noreturn]] void CipherBroke(const char* what) {
  // OpenSSL refusing AES-GCM on a fixed-size key and nonce is a broken installation, not an
  // input error: nothing could be authenticated, so the process must not go on.
  std::fprintf(stderr, "actorflow: data plane frame authentication: OpenSSL's AES-256-GCM failed in %s\n", what);
  std::abort();
}

}  // namespace

struct FrameAuthenticator::Cipher {
  EVP_CIPHER_CTX* context = nullptr;
};

FrameAuthenticator::FrameAuthenticator(const unsigned char key[kFrameKeyBytes]) : cipher_(std::make_unique<Cipher>()) {
  cipher_->context = EVP_CIPHER_CTX_new();
  if (cipher_->context == nullptr ||
      EVP_EncryptInit_ex(cipher_->context, EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(cipher_->context, EVP_CTRL_GCM_SET_IVLEN, 12, nullptr) != 1 ||
      EVP_EncryptInit_ex(cipher_->context, nullptr, nullptr, key, nullptr) != 1)
    CipherBroke("setting the key");
}

FrameAuthenticator::~FrameAuthenticator() { EVP_CIPHER_CTX_free(cipher_->context); }

void FrameAuthenticator::Begin(Part part) {
  // Nonce = part (4 bytes) | sequence (8 bytes): unique per key, since the key is fresh per
  // connection and direction and the sequence only grows.
  unsigned char nonce[12];
  const uint32_t part_value = part;
  std::memcpy(nonce, &part_value, 4);
  std::memcpy(nonce + 4, &sequence_, 8);
  if (EVP_EncryptInit_ex(cipher_->context, nullptr, nullptr, nullptr, nonce) != 1) CipherBroke("setting the nonce");
}

void FrameAuthenticator::Add(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (bytes > 0) {  // EVP takes int lengths
    const int piece = static_cast<int>(bytes < (1u << 30) ? bytes : (1u << 30));
    int written = 0;
    if (EVP_EncryptUpdate(cipher_->context, nullptr, &written, p, piece) != 1) CipherBroke("hashing bytes");
    p += piece;
    bytes -= static_cast<size_t>(piece);
  }
}

void FrameAuthenticator::Finish(unsigned char tag[kFrameTagBytes]) {
  unsigned char none[16];
  int written = 0;
  if (EVP_EncryptFinal_ex(cipher_->context, none, &written) != 1 ||
      EVP_CIPHER_CTX_ctrl(cipher_->context, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kFrameTagBytes), tag) != 1)
    CipherBroke("computing a tag");
}

bool FrameAuthenticator::Check(const unsigned char tag[kFrameTagBytes]) {
  unsigned char expected[kFrameTagBytes];
  Finish(expected);
  return CRYPTO_memcmp(expected, tag, kFrameTagBytes) == 0;
}

}  // namespace actorflow
