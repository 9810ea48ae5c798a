// zero::metrics::MetricsServer over real loopback sockets: scrapes, bind errors, and clients that
// misbehave while the training thread keeps updating.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <future>
#include <map>
#include <sstream>

#include "zero/error.h"
#include "zero/metrics.h"

namespace zero::metrics {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Sample lines of a text-format body: "name{labels}" -> value. Fails the test on a line that is
// neither a comment nor "series value".
std::map<std::string, double> parse_samples(const std::string& body) {
  std::map<std::string, double> samples;
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) continue;
    const auto space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    if (space != std::string::npos) samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return samples;
}

// A raw TCP connection to the server, for clients httplib would not be.
int connect_raw(int port, int receive_buffer = 0) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (receive_buffer > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
  timeval limit{10, 0};  // the test's own bound, far above the server's
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  return fd;
}

// Reads until the server closes the connection (or the test's 10 s bound); returns all bytes.
std::string read_until_closed(int fd) {
  std::string all;
  char buffer[65536];
  for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) all.append(buffer, n);
  return all;
}

// The training thread's side: updates metrics until `done` is ready. Returns how many updates ran
// and the longest time one batch of 1000 took (it would be seconds if an update waited on a socket).
struct UpdateRun {
  long updates = 0;
  double longest_batch_seconds = 0;
};
UpdateRun update_until(TrainingMetrics& m, std::future<void>& done) {
  UpdateRun run;
  while (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    const auto start = Clock::now();
    for (int i = 0; i < 1000; ++i, ++run.updates) {
      m.step_time_seconds.set(0.001 * i);
      m.allgather_seconds.observe(0.002);
      m.collective_bytes_total("all_gather");  // looks up under the registry's lock
    }
    run.longest_batch_seconds = std::max(run.longest_batch_seconds, seconds_since(start));
  }
  return run;
}

httplib::Result scrape(int port, const std::string& path = "/metrics") {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(5));
  return client.Get(path.c_str());
}

TEST(MetricsServer, ServesTheRegistryOverHttp) {
  Registry registry;
  TrainingMetrics m(registry, 0, "test");
  MetricsServer server(registry, "127.0.0.1", 0);
  ASSERT_GT(server.port(), 0);
  m.loss.set(2.5);
  auto result = scrape(server.port());
  ASSERT_TRUE(result) << httplib::to_string(result.error());
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(result->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  auto samples = parse_samples(result->body);
  EXPECT_EQ(samples.at("deepspeed:loss{rank=\"0\",job_name=\"test\"}"), 2.5);
  EXPECT_EQ(samples.at("deepspeed:allgather_seconds_bucket{rank=\"0\",job_name=\"test\",le=\"+Inf\"}"), 0);

  m.loss.set(1.75);  // rendered per request, not cached
  result = scrape(server.port());
  ASSERT_TRUE(result);
  EXPECT_EQ(parse_samples(result->body).at("deepspeed:loss{rank=\"0\",job_name=\"test\"}"), 1.75);

  result = scrape(server.port(), "/");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 404);
}

TEST(MetricsServer, BindFailureNamesHostAndPort) {
  Registry registry;
  MetricsServer first(registry, "127.0.0.1", 0);
  const std::string taken = "127.0.0.1:" + std::to_string(first.port());
  try {
    MetricsServer second(registry, "127.0.0.1", first.port());
    FAIL() << "a second server bound " << taken;
  } catch (const Error& e) {
    EXPECT_EQ(e.subject(), taken);
    EXPECT_NE(std::string(e.what()).find("cannot listen on " + taken), std::string::npos) << e.what();
  }
  EXPECT_THROW(MetricsServer(registry, "192.0.2.1", 0), Error);  // TEST-NET: not this machine's
}

// Three clients that each hold a worker: one sends garbage, one never sends, one stops halfway
// through its request. Each must be answered 400 or dropped within about client_timeout.
TEST(MetricsServer, BadClientsStallNeitherUpdatesNorScrapes) {
  Registry registry;
  TrainingMetrics m(registry, 0, "test");
  MetricsServer server(registry, ServerOptions{.port = 0, .client_timeout = std::chrono::seconds(1)});
  const auto connected = Clock::now();
  const int garbage = connect_raw(server.port());
  const int silent = connect_raw(server.port());
  const int halfway = connect_raw(server.port());
  const char bytes[] = "\x16\x03\x01\x02\x00\x01\xff garbage \x00\r\n\r\n";
  ASSERT_GT(send(garbage, bytes, sizeof(bytes), 0), 0);
  const char half_request[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n";  // no blank line: headers never end
  ASSERT_GT(send(halfway, half_request, sizeof(half_request) - 1, 0), 0);

  std::promise<void> done;
  std::future<void> done_future = done.get_future();
  std::string garbage_reply, halfway_reply;
  double scrape_seconds = 0, bad_clients_dropped_after = 0;
  int scrape_status = 0;
  std::thread clients([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the bad clients hold workers
    const auto start = Clock::now();
    auto result = scrape(server.port());
    scrape_seconds = seconds_since(start);
    scrape_status = result ? result->status : -1;
    garbage_reply = read_until_closed(garbage);
    EXPECT_EQ(read_until_closed(silent), "");
    halfway_reply = read_until_closed(halfway);
    bad_clients_dropped_after = seconds_since(connected);
    done.set_value();
  });
  const UpdateRun run = update_until(m, done_future);
  clients.join();
  for (int fd : {garbage, silent, halfway}) close(fd);

  EXPECT_EQ(scrape_status, 200);
  EXPECT_LT(scrape_seconds, 0.5);  // answered at once, not after a bad client's 1 s timeout
  EXPECT_TRUE(garbage_reply.empty() || garbage_reply.starts_with("HTTP/1.1 400")) << garbage_reply;
  EXPECT_TRUE(halfway_reply.empty() || halfway_reply.starts_with("HTTP/1.1 400")) << halfway_reply;
  EXPECT_LT(bad_clients_dropped_after, 3.0);  // the server's limit, not never (nor httplib's 5 s)
  EXPECT_GT(run.updates, 10000);
  EXPECT_LT(run.longest_batch_seconds, 0.5);
}

TEST(MetricsServer, ClientThatNeverReadsHoldsOneWorkerUntilItsTimeout) {
  Registry registry;
  TrainingMetrics m(registry, 0, "test");
  // ~10 MB of output: more than the kernel buffers, so writing to a client that never reads blocks.
  for (int i = 0; i < 100000; ++i) {
    registry.gauge("filler_bytes", "Padding.", {{"name", "a_long_label_value_to_make_the_output_larger_than_any_socket_buffer_" + std::to_string(i)}});
  }
  const size_t body_size = registry.render().size();
  ASSERT_GT(body_size, 8u << 20);
  // A 3 s timeout: a scrape that waited for the stuck worker would take over 2.7 s, while one served
  // by another worker takes what 10 MB takes, well under 1 s unloaded, but ~1 s beside other tests.
  auto server = std::make_unique<MetricsServer>(registry, ServerOptions{.port = 0, .client_timeout = std::chrono::seconds(3)});
  const int port = server->port();
  const int never_reads = connect_raw(port, 4096);
  const char request[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(send(never_reads, request, sizeof(request) - 1, 0), 0);

  std::promise<void> done;
  std::future<void> done_future = done.get_future();
  size_t scraped = 0;
  double scrape_seconds = 0, stop_seconds = 0;
  std::thread clients([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the server is blocked writing
    auto start = Clock::now();
    auto result = scrape(port);
    scrape_seconds = seconds_since(start);
    scraped = result && result->status == 200 ? result->body.size() : 0;
    start = Clock::now();
    server.reset();  // with the never-reading client still connected
    stop_seconds = seconds_since(start);
    done.set_value();
  });
  const UpdateRun run = update_until(m, done_future);
  clients.join();
  const size_t delivered = read_until_closed(never_reads).size();
  close(never_reads);

  EXPECT_NEAR(scraped, body_size, 1000);  // a whole body (a few values changed meanwhile)
  EXPECT_LT(scrape_seconds, 2.5);         // served by another worker, not after the stuck one
  EXPECT_LT(stop_seconds, 7.0);           // within about twice client_timeout
  EXPECT_LT(delivered, body_size);  // the server gave up on it rather than waiting for ever
  EXPECT_GT(run.updates, 10000);
  EXPECT_LT(run.longest_batch_seconds, 0.5);
}

TEST(MetricsServer, DestructorReturnsPromptlyWithASilentClient) {
  Registry registry;
  auto server = std::make_unique<MetricsServer>(registry, ServerOptions{.port = 0, .client_timeout = std::chrono::seconds(1)});
  const int silent = connect_raw(server->port());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = Clock::now();
  server.reset();
  EXPECT_LT(seconds_since(start), 2.5);
  close(silent);
}

}  // namespace
}  // namespace zero::metrics
