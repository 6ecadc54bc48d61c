#include "comm/cluster_tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/openssl/manager.hpp>

namespace actorflow {

namespace {

// OpenSSL's queued errors, oldest first, as one line (and the queue emptied).
std::string OpenSslErrors() {
  std::string text;
  while (unsigned long code = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof buffer);
    if (!text.empty()) text += "; ";
    text += buffer;
  }
  return text.empty() ? "no reason given" : text;
}

Status Readable(const char* field, const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr)
    return InvalidArgument(std::string("cluster TLS: cannot read the ") + field + " '" + path +
                           "': " + std::strerror(errno));
  std::fclose(file);
  return Status::Ok();
}

}  // namespace

Status CheckClusterTls(const ClusterTls& tls) {
  std::vector<std::string> missing;
  if (tls.certificate_file.empty()) missing.push_back("certificate_file");
  if (tls.key_file.empty()) missing.push_back("key_file");
  if (tls.ca_file.empty()) missing.push_back("ca_file");
  if (!missing.empty()) {
    std::string names;
    for (const std::string& name : missing) names += (names.empty() ? "" : ", ") + name;
    return InvalidArgument("cluster TLS needs a certificate, its key and the cluster CA's certificate; missing: " +
                           names + " (without all three CAF's OpenSSL module would not authenticate peers)");
  }
  AF_RETURN_IF_ERROR(Readable("certificate file", tls.certificate_file));
  AF_RETURN_IF_ERROR(Readable("key file", tls.key_file));
  AF_RETURN_IF_ERROR(Readable("CA file", tls.ca_file));
  // The same calls CAF's module makes per connection, made once here where a failure can be
  // reported (in CAF a failure there ends the process).
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context(SSL_CTX_new(TLS_method()), &SSL_CTX_free);
  if (!context) return FailedPrecondition("cluster TLS: cannot create an OpenSSL context: " + OpenSslErrors());
  if (SSL_CTX_use_certificate_chain_file(context.get(), tls.certificate_file.c_str()) != 1)
    return InvalidArgument("cluster TLS: the certificate file '" + tls.certificate_file +
                           "' holds no usable PEM certificate: " + OpenSslErrors());
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(nullptr, &EVP_PKEY_free);
  if (std::FILE* file = std::fopen(tls.key_file.c_str(), "rb")) {
    key.reset(PEM_read_PrivateKey(file, nullptr, nullptr, const_cast<char*>("")));
    std::fclose(file);
  }
  if (!key)
    return InvalidArgument("cluster TLS: the key file '" + tls.key_file +
                           "' holds no usable unencrypted PEM private key: " + OpenSslErrors());
  if (SSL_CTX_use_PrivateKey(context.get(), key.get()) != 1 || SSL_CTX_check_private_key(context.get()) != 1)
    return InvalidArgument("cluster TLS: the key in '" + tls.key_file + "' does not belong to the certificate in '" +
                           tls.certificate_file + "': " + OpenSslErrors());
  if (SSL_CTX_load_verify_locations(context.get(), tls.ca_file.c_str(), nullptr) != 1)
    return InvalidArgument("cluster TLS: the CA file '" + tls.ca_file + "' holds no usable PEM certificate: " +
                           OpenSslErrors());
  // A certificate the CA did not sign would be refused by every peer: say so now.
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> verify(X509_STORE_CTX_new(), &X509_STORE_CTX_free);
  STACK_OF(X509)* chain = nullptr;
  SSL_CTX_get0_chain_certs(context.get(), &chain);
  if (!verify || X509_STORE_CTX_init(verify.get(), SSL_CTX_get_cert_store(context.get()),
                                     SSL_CTX_get0_certificate(context.get()), chain) != 1)
    return FailedPrecondition("cluster TLS: cannot set up certificate verification: " + OpenSslErrors());
  if (X509_verify_cert(verify.get()) != 1)
    return InvalidArgument("cluster TLS: the certificate in '" + tls.certificate_file +
                           "' is not valid under the CA in '" + tls.ca_file + "': " +
                           X509_verify_cert_error_string(X509_STORE_CTX_get_error(verify.get())));
  return Status::Ok();
}

void ConfigureClusterTls(caf::actor_system_config& config, const ClusterTls& tls) {
  config.load<caf::openssl::manager>();
  config.set("openssl.certificate", tls.certificate_file);
  config.set("openssl.key", tls.key_file);
  config.set("openssl.cafile", tls.ca_file);
}

Status CheckSystemUsesClusterTls(const caf::actor_system& system, const ClusterTls& tls) {
  if (!system.has_openssl_manager())
    return FailedPrecondition(
        "cluster TLS is configured but the actor environment has no OpenSSL module: build the environment with "
        "AddNetworkLayer / NetworkLayerConfigurator of the same ClusterOptions");
  const caf::actor_system_config& config = system.config();
  if (config.openssl_certificate != tls.certificate_file || config.openssl_key != tls.key_file ||
      config.openssl_cafile != tls.ca_file || !config.openssl_passphrase.empty() || !config.openssl_capath.empty())
    return FailedPrecondition("cluster TLS: the actor environment's OpenSSL module was configured with other files (" +
                              config.openssl_certificate + ", " + config.openssl_key + ", " + config.openssl_cafile +
                              ") than the cluster's (" + tls.certificate_file + ", " + tls.key_file + ", " +
                              tls.ca_file + ")");
  return Status::Ok();
}

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

}  // namespace actorflow
