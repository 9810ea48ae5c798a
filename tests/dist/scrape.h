// The Prometheus endpoint as a scraper sees it, for the tests that check its series.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <string>

#include "tests/dist/dist_test_world.h"

namespace scrape {

// GET /metrics from this host's `port`, as a scraper does (HTTP/1.0: the server closes when done).
inline std::string metrics(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string text;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) text.append(buffer, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return text;
}

// The value of the series whose line begins with `series` ("" when absent).
inline std::string series_value(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return "";
  const size_t begin = at + series.size() + 2;
  return text.substr(begin, text.find('\n', begin) - begin);
}

// A base port every rank agrees on (rank 0's pick): each host's ranks serve base + local rank.
inline int shared_base_port() {
  at::Tensor port = torch::tensor({20000 + static_cast<int>(::getpid() % 20000)}, torch::kInt);
  test_world().communicator().broadcast(port, 0, {.async = false});
  return port.item<int>();
}

}  // namespace scrape
