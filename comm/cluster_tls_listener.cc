#include "comm/cluster_tls_listener.h"

#include <cstdio>
#include <memory>
#include <set>
#include <utility>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/io/middleman_actor_impl.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/doorman_impl.hpp>
#include <caf/io/network/stream_impl.hpp>
#include <caf/openssl/session.hpp>

namespace actorflow {

namespace {

using caf::io::network::native_socket;
using caf::io::network::rw_state;

// Reads and writes through a CAF OpenSSL session. Until the handshake has passed (the first
// application byte either way: TLS 1.3 completes the server's handshake only once the client's
// certificate was verified) a failure is a refused handshake, and is logged once.
class LoggingTlsPolicy {
 public:
  LoggingTlsPolicy(caf::openssl::session_ptr session, std::string peer, std::shared_ptr<const std::string> prefix)
      : session_(std::move(session)), peer_(std::move(peer)), prefix_(std::move(prefix)) {}

  rw_state read_some(size_t& result, native_socket fd, void* buffer, size_t length) {
    result = 0;  // (the session sets it on every path; the compiler cannot see that)
    return Note(session_->read_some(result, fd, buffer, length), result);
  }
  rw_state write_some(size_t& result, native_socket fd, const void* buffer, size_t length) {
    result = 0;
    return Note(session_->write_some(result, fd, buffer, length), result);
  }
  // Bytes already decrypted inside OpenSSL count as readable (the socket may have none left).
  bool must_read_more(native_socket fd, size_t threshold) { return session_->must_read_more(fd, threshold); }

 private:
  rw_state Note(rw_state state, size_t result) {
    if (result > 0) established_ = true;
    if (state == rw_state::failure && !established_ && !logged_) {
      logged_ = true;
      std::fprintf(stderr,
                   "%s refused a control-plane connection from %s: its TLS handshake failed (no certificate, one "
                   "the cluster CA did not sign, or not TLS)\n",
                   prefix_->c_str(), peer_.c_str());
      std::fflush(stderr);
    }
    return state;
  }

  caf::openssl::session_ptr session_;
  std::string peer_;
  std::shared_ptr<const std::string> prefix_;
  bool established_ = false;
  bool logged_ = false;
};

// One accepted connection: a CAF stream driven through the policy above.
class LoggingTlsScribe : public caf::io::scribe {
 public:
  LoggingTlsScribe(caf::io::network::default_multiplexer& multiplexer, native_socket fd,
                   caf::openssl::session_ptr session, std::string peer, std::shared_ptr<const std::string> prefix)
      : caf::io::scribe(caf::io::network::conn_hdl_from_socket(fd)),
        stream_(multiplexer, fd, std::move(session), std::move(peer), std::move(prefix)) {}

  void configure_read(caf::io::receive_policy::config config) override {
    stream_.configure_read(config);
    if (launched_) return;
    launched_ = true;
    stream_.start(this);
    // The handshake needs the socket polled for writing too: an empty write schedules it.
    stream_.force_empty_write(this);
  }
  void ack_writes(bool enable) override { stream_.ack_writes(enable); }
  std::vector<char>& wr_buf() override { return stream_.wr_buf(); }
  std::vector<char>& rd_buf() override { return stream_.rd_buf(); }
  void graceful_shutdown() override {
    stream_.graceful_shutdown();
    detach(&stream_.backend(), false);
  }
  void flush() override { stream_.flush(this); }
  std::string addr() const override {
    auto address = caf::io::network::remote_addr_of_fd(stream_.fd());
    return address ? *address : std::string();
  }
  uint16_t port() const override {
    auto port = caf::io::network::remote_port_of_fd(stream_.fd());
    return port ? *port : 0;
  }
  void add_to_loop() override { stream_.activate(this); }
  void remove_from_loop() override { stream_.passivate(); }

 private:
  bool launched_ = false;
  caf::io::network::stream_impl<LoggingTlsPolicy> stream_;
};

class LoggingTlsDoorman : public caf::io::network::doorman_impl {
 public:
  LoggingTlsDoorman(caf::io::network::default_multiplexer& multiplexer, native_socket fd,
                    std::shared_ptr<const std::string> prefix)
      : caf::io::network::doorman_impl(multiplexer, fd), prefix_(std::move(prefix)) {}

  bool new_connection() override {
    if (detached()) return false;  // the broker let go while the socket still had events
    auto& multiplexer = acceptor_.backend();
    native_socket fd = acceptor_.accepted_socket();
    caf::io::network::nonblocking(fd, true);
    auto address = caf::io::network::remote_addr_of_fd(fd);
    auto port = caf::io::network::remote_port_of_fd(fd);
    std::string peer = (address ? *address : std::string("?")) + ":" + (port ? std::to_string(*port) : "?");
    auto session = caf::openssl::make_session(parent()->system(), fd, /*from_accepted_socket=*/true);
    if (session == nullptr) {
      std::fprintf(stderr,
                   "%s refused a control-plane connection from %s: its TLS handshake failed (no certificate, one "
                   "the cluster CA did not sign, or not TLS)\n",
                   prefix_->c_str(), peer.c_str());
      std::fflush(stderr);
      caf::io::network::close_socket(fd);
      return false;
    }
    auto scribe = caf::make_counted<LoggingTlsScribe>(multiplexer, fd, std::move(session), std::move(peer), prefix_);
    auto handle = scribe->hdl();
    parent()->add_scribe(std::move(scribe));
    return caf::io::doorman::new_connection(&multiplexer, handle);
  }

 private:
  std::shared_ptr<const std::string> prefix_;
};

// CAF's middleman actor (publish, unpublish, ...), listening through the doorman above.
class LoggingTlsMiddleman : public caf::io::middleman_actor_impl {
 public:
  LoggingTlsMiddleman(caf::actor_config& config, caf::actor broker, std::shared_ptr<const std::string> prefix)
      : caf::io::middleman_actor_impl(config, std::move(broker)), prefix_(std::move(prefix)) {}
  const char* name() const override { return "actorflow::tls_listener"; }

 protected:
  caf::expected<caf::io::doorman_ptr> open(uint16_t port, const char* address, bool reuse) override {
    auto fd = caf::io::network::new_tcp_acceptor_impl(port, address, reuse);
    if (!fd) return std::move(fd.error());
    auto& multiplexer = static_cast<caf::io::network::default_multiplexer&>(system().middleman().backend());
    return caf::make_counted<LoggingTlsDoorman>(multiplexer, *fd, prefix_);
  }
  caf::expected<caf::io::scribe_ptr> connect(const std::string&, uint16_t) override {
    return caf::sec::cannot_connect_to_node;  // this actor only listens
  }

 private:
  std::shared_ptr<const std::string> prefix_;
};

}  // namespace

TlsListener::TlsListener(caf::actor_system& system, std::string log_prefix) : system_(system) {
  caf::actor broker = system.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  middleman_ = system.spawn<LoggingTlsMiddleman, caf::hidden>(
      std::move(broker), std::make_shared<const std::string>(std::move(log_prefix)));
}

TlsListener::~TlsListener() { caf::anon_send_exit(middleman_, caf::exit_reason::user_shutdown); }

StatusOr<uint16_t> TlsListener::Publish(const caf::actor& whom, const std::string& host, uint16_t port) {
  caf::scoped_actor self{system_};
  std::set<std::string> interface = system_.message_types(whom);
  StatusOr<uint16_t> result = FailedPrecondition("no reply");
  self->request(middleman_, std::chrono::seconds(30), caf::publish_atom::value, port,
                caf::actor_cast<caf::strong_actor_ptr>(whom), std::move(interface), host, /*reuse=*/false)
      .receive([&](uint16_t bound) { result = bound; },
               [&](caf::error& error) { result = FailedPrecondition(system_.render(error)); });
  return result;
}

void TlsListener::Unpublish(const caf::actor& whom, uint16_t port) {
  caf::anon_send(middleman_, caf::unpublish_atom::value, whom.address(), port);
}

}  // namespace actorflow
