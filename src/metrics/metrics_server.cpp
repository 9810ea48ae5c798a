// MetricsServer: cpp-httplib serving the registry on its own threads.
//
// Note: a scrape must never slow or stop training, and a stuck client must not stop the next
// scrape. So: every socket wait is bounded by client_timeout (read, write and the wait for a
// request), each connection serves one request, request bodies are capped, and the workers are
// a small pool of their own. The handler renders into a string first and httplib writes it
// after, so no registry lock is held while a socket blocks.
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include <httplib.h>

#include "zero/error.h"
#include "zero/metrics.h"

namespace zero::metrics {

struct MetricsServer::Listener {
  httplib::Server http;
  std::thread thread;
  std::atomic<bool> finished{false};  // listen_after_bind() returned
};

MetricsServer::MetricsServer(const Registry& registry, const std::string& host, int port)
    : MetricsServer(registry, ServerOptions{.host = host, .port = port}) {}

MetricsServer::MetricsServer(const Registry& registry, ServerOptions options)
    : options_(std::move(options)), listener_(std::make_unique<Listener>()) {
  const std::string address = options_.host + ":" + std::to_string(options_.port);
  if (options_.worker_threads < 1 || options_.client_timeout.count() < 1 || options_.port < 0 ||
      options_.port > 65535) {
    throw Error("metrics server " + address + ": needs a port in 0..65535, worker_threads >= 1 and client_timeout >= 1 s",
                address);
  }
  httplib::Server& http = listener_->http;
  http.Get("/metrics", [&registry](const httplib::Request&, httplib::Response& response) {
    response.set_content(registry.render(), kTextContentType);
  });
  http.set_read_timeout(options_.client_timeout);
  http.set_write_timeout(options_.client_timeout);
  // Note: httplib waits this long for a request on a fresh connection; one request per
  // connection means an idle keep-alive connection never holds a worker between scrapes.
  http.set_keep_alive_timeout(options_.client_timeout.count());
  http.set_keep_alive_max_count(1);
  http.set_payload_max_length(4096);  // GET has no body: don't buffer one a client sends anyway
  const size_t workers = options_.worker_threads;
  http.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  // Note: httplib's default sets SO_REUSEPORT, which would let two ranks bind the same port and
  // split the scrapes between them; SO_REUSEADDR only allows a restart over TIME_WAIT sockets.
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });

  errno = 0;
  port_ = options_.port == 0 ? http.bind_to_any_port(options_.host)
                             : (http.bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port_ < 0) {
    const std::string reason = errno != 0 ? std::strerror(errno) : "no such local address";
    throw Error("metrics server: cannot listen on " + address + ": " + reason, address);
  }
  listener_->thread = std::thread([listener = listener_.get()] {
    listener->http.listen_after_bind();
    listener->finished = true;
  });
  // Note: httplib's stop() does nothing until the listener has marked itself running, so the
  // destructor could otherwise miss a server that had not started yet and wait forever.
  while (!http.is_running() && !listener_->finished) std::this_thread::sleep_for(std::chrono::microseconds(100));
}

MetricsServer::~MetricsServer() {
  // stop() closes the listening socket; the pool then finishes the connections it has, each
  // bounded by client_timeout, and queued ones close at once (they see the server stopped).
  listener_->http.stop();
  if (listener_->thread.joinable()) listener_->thread.join();
}

}  // namespace zero::metrics
