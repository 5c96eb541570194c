// hexisim-nfdelay: one-way delays for the testbed's emulated network (validation/testbed.hpp),
// where the kernel has no sch_netem. The switch namespace sends every forwarded IPv4 packet
// to NFQUEUE; this program holds each for the delay of its (source, destination) address
// pair, then accepts it. One FIFO per pair keeps each flow's order.
//
//   hexisim-nfdelay QUEUE SRC_IP,DST_IP=MICROSECONDS...
//
// Runs until SIGTERM/SIGINT; then accepts what it still holds and prints how late the
// releases were (the emulation's own error) on stderr. Run it SCHED_FIFO: it needs little CPU
// but must wake on time on a loaded machine.

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

extern "C" {
#include <libnetfilter_queue/libnetfilter_queue.h>
}

namespace {

struct Held {
  std::uint64_t due_ns;
  std::uint32_t id;
};

struct Flow {
  std::uint64_t delay_ns = 0;
  std::deque<Held> held;
};

std::map<std::pair<std::uint32_t, std::uint32_t>, Flow> g_flows;
nfq_q_handle* g_queue = nullptr;
volatile std::sig_atomic_t g_stop = 0;
std::uint64_t g_packets = 0, g_released = 0, g_late_sum = 0, g_late_max = 0, g_late_1ms = 0;

std::uint64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1000000000ull +
         static_cast<std::uint64_t>(t.tv_nsec);
}

int on_packet(nfq_q_handle* q, nfgenmsg*, nfq_data* nfa, void*) {
  const nfqnl_msg_packet_hdr* ph = nfq_get_msg_packet_hdr(nfa);
  const std::uint32_t id = ntohl(ph->packet_id);
  unsigned char* p = nullptr;
  const int len = nfq_get_payload(nfa, &p);
  if (len >= 20 && (p[0] >> 4) == 4) {
    std::uint32_t src = 0, dst = 0;
    std::memcpy(&src, p + 12, 4);
    std::memcpy(&dst, p + 16, 4);
    auto it = g_flows.find({src, dst});
    if (it != g_flows.end() && it->second.delay_ns > 0) {
      it->second.held.push_back({now_ns() + it->second.delay_ns, id});
      ++g_packets;
      return 0;
    }
  }
  return nfq_set_verdict(q, id, NF_ACCEPT, 0, nullptr);
}

void on_signal(int) {
  g_stop = 1;
}

bool parse_flow(const char* arg) {
  const std::string text(arg);
  const auto comma = text.find(',');
  const auto eq = text.find('=');
  if (comma == std::string::npos || eq == std::string::npos || eq < comma) return false;
  std::uint32_t src = 0, dst = 0;
  if (inet_pton(AF_INET, text.substr(0, comma).c_str(), &src) != 1) return false;
  if (inet_pton(AF_INET, text.substr(comma + 1, eq - comma - 1).c_str(), &dst) != 1) return false;
  char* end = nullptr;
  const double us = std::strtod(text.c_str() + eq + 1, &end);
  if (end == nullptr || *end != '\0' || !(us >= 0) || us > 1e7) return false;
  g_flows[{src, dst}].delay_ns = static_cast<std::uint64_t>(us * 1000.0);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s QUEUE SRC_IP,DST_IP=MICROSECONDS...\n", argv[0]);
    return 2;
  }
  const int queue = std::atoi(argv[1]);
  for (int i = 2; i < argc; ++i) {
    if (!parse_flow(argv[i])) {
      std::fprintf(stderr, "hexisim-nfdelay: %s: expected SRC_IP,DST_IP=MICROSECONDS\n", argv[i]);
      return 2;
    }
  }
  prctl(PR_SET_TIMERSLACK, 1UL);  // wake within microseconds, not the default 50 us
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  nfq_handle* h = nfq_open();
  if (h == nullptr) {
    std::perror("hexisim-nfdelay: nfq_open");
    return 1;
  }
  g_queue = nfq_create_queue(h, static_cast<std::uint16_t>(queue), on_packet, nullptr);
  if (g_queue == nullptr) {
    std::perror("hexisim-nfdelay: nfq_create_queue");
    return 1;
  }
  nfq_set_mode(g_queue, NFQNL_COPY_PACKET, 20);  // the IP header is all it reads
  nfq_set_queue_maxlen(g_queue, 100000);
  nfq_set_queue_flags(g_queue, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO);
  const int fd = nfq_fd(h);
  int rcvbuf = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
  int one = 1;
  setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof one);
  std::fprintf(stderr, "hexisim-nfdelay: queue %d, %zu flows\n", queue, g_flows.size());
  std::vector<char> buf(1 << 16);
  while (g_stop == 0) {
    const std::uint64_t t = now_ns();
    std::uint64_t next = std::numeric_limits<std::uint64_t>::max();
    for (auto& [key, flow] : g_flows) {
      while (!flow.held.empty() && flow.held.front().due_ns <= t) {
        const std::uint64_t late = t - flow.held.front().due_ns;
        g_late_sum += late;
        g_late_max = std::max(g_late_max, late);
        g_late_1ms += late > 1000000 ? 1 : 0;
        ++g_released;
        nfq_set_verdict(g_queue, flow.held.front().id, NF_ACCEPT, 0, nullptr);
        flow.held.pop_front();
      }
      if (!flow.held.empty()) next = std::min(next, flow.held.front().due_ns);
    }
    timespec wait{};
    timespec* wait_p = nullptr;
    if (next != std::numeric_limits<std::uint64_t>::max()) {
      const std::uint64_t w = next - t;
      wait.tv_sec = static_cast<time_t>(w / 1000000000ull);
      wait.tv_nsec = static_cast<long>(w % 1000000000ull);
      wait_p = &wait;
    }
    pollfd pf{fd, POLLIN, 0};
    if (ppoll(&pf, 1, wait_p, nullptr) > 0) {
      ssize_t n = 0;
      while ((n = recv(fd, buf.data(), buf.size(), MSG_DONTWAIT)) > 0)
        nfq_handle_packet(h, buf.data(), static_cast<int>(n));
    }
  }
  for (auto& [key, flow] : g_flows) {
    for (const Held& held : flow.held) nfq_set_verdict(g_queue, held.id, NF_ACCEPT, 0, nullptr);
  }
  std::fprintf(stderr,
               "hexisim-nfdelay: %llu packets delayed; release lateness mean %.1f us, max %.1f "
               "us, %llu over 1 ms\n",
               static_cast<unsigned long long>(g_packets),
               g_released > 0 ? static_cast<double>(g_late_sum) / 1e3 / g_released : 0.0,
               static_cast<double>(g_late_max) / 1e3, static_cast<unsigned long long>(g_late_1ms));
  nfq_destroy_queue(g_queue);
  nfq_close(h);
  return 0;
}
