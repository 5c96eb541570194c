#include "studies/sweep_pool.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>

namespace hexi {
inline namespace studies {
namespace {

// Writes all of `text`; false on an error (EPIPE: the reader is gone).
bool write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// Reads one line ("12\n") from `fd` into `out`, through `buffer`; false at end of file.
bool read_line(int fd, std::string& buffer, std::string& out) {
  for (;;) {
    if (auto nl = buffer.find('\n'); nl != std::string::npos) {
      out = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      return true;
    }
    char chunk[256];
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buffer.append(chunk, static_cast<std::size_t>(n));
  }
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  return "ended (wait status " + std::to_string(status) + ")";
}

}  // namespace

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

WorkerPool::WorkerPool(int workers, Compute compute, std::function<void()> in_child)
    : count_(workers), compute_(std::move(compute)), in_child_(std::move(in_child)) {}

WorkerPool::~WorkerPool() {
  stop();
}

Status WorkerPool::start() {
  workers_.resize(static_cast<std::size_t>(count_));
  for (Worker& w : workers_) {
    if (auto st = spawn(w); !st) return st;
  }
  return {};
}

int WorkerPool::idle() const {
  int n = 0;
  for (const Worker& w : workers_) n += w.pid > 0 && w.index < 0 ? 1 : 0;
  return n;
}

int WorkerPool::busy() const {
  int n = 0;
  for (const Worker& w : workers_) n += w.index >= 0 ? 1 : 0;
  return n;
}

Status WorkerPool::spawn(Worker& w) {
  int task[2], result[2];
  if (::pipe2(task, O_CLOEXEC) != 0) return failure(std::string("pipe: ") + std::strerror(errno));
  if (::pipe2(result, O_CLOEXEC) != 0) {
    ::close(task[0]);
    ::close(task[1]);
    return failure(std::string("pipe: ") + std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    for (int fd : {task[0], task[1], result[0], result[1]}) ::close(fd);
    return failure(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(0);  // the parent died before prctl took effect
    ::close(task[1]);
    ::close(result[0]);
    for (const Worker& other : workers_) {  // other workers' pipes: theirs and the parent's
      if (&other == &w) continue;
      if (other.task_fd >= 0) ::close(other.task_fd);
      if (other.result_fd >= 0) ::close(other.result_fd);
    }
    worker_main(task[0], result[1]);
  }
  ::close(task[0]);
  ::close(result[1]);
  w = Worker{};
  w.pid = pid;
  w.task_fd = task[1];
  w.result_fd = result[0];
  return {};
}

void WorkerPool::worker_main(int task_fd, int result_fd) {
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGPIPE, SIG_DFL);
  if (in_child_) in_child_();
  std::string buffer, line;
  while (read_line(task_fd, buffer, line)) {
    const std::string row = compute_(std::stoi(line)) + "\n";
    if (!write_all(result_fd, row)) break;
  }
  ::_exit(0);
}

Status WorkerPool::submit(int index) {
  for (Worker& w : workers_) {
    if (w.pid <= 0 || w.index >= 0) continue;
    w.index = index;
    w.since = steady_seconds();
    // A dead worker's pipe fails here (EPIPE; SIGPIPE is ignored by the sweep); its
    // death is then seen by wait(), which reports the point.
    write_all(w.task_fd, std::to_string(index) + "\n");
    return {};
  }
  return failure("internal error: no idle sweep worker for point " + std::to_string(index));
}

Result<std::vector<WorkerPool::Done>> WorkerPool::wait(int timeout_ms) {
  std::vector<pollfd> fds;
  for (const Worker& w : workers_) fds.push_back({w.result_fd, POLLIN, 0});
  std::vector<Done> done;
  const int n = ::poll(fds.data(), fds.size(), timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return done;
    return failure(std::string("poll: ") + std::strerror(errno));
  }
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    if (auto st = drain(workers_[i], done); !st) return st.error();
  }
  return done;
}

Status WorkerPool::drain(Worker& w, std::vector<Done>& done) {
  char chunk[65536];
  const ssize_t n = ::read(w.result_fd, chunk, sizeof chunk);
  if (n < 0 && errno == EINTR) return {};
  if (n > 0) {
    w.buffer.append(chunk, static_cast<std::size_t>(n));
    if (auto nl = w.buffer.find('\n'); nl != std::string::npos) {
      done.push_back({w.index, w.buffer.substr(0, nl), std::nullopt, steady_seconds() - w.since});
      w.buffer.erase(0, nl + 1);
      w.index = -1;
    }
    return {};
  }
  // End of file: the worker died. Report its point, if it had one, and replace it.
  std::string why;
  reap(w, &why);
  if (w.index >= 0) {
    done.push_back(
        {w.index, "", "the worker process computing it " + why, steady_seconds() - w.since});
  }
  return spawn(w);
}

void WorkerPool::reap(Worker& w, std::string* why) {
  if (w.task_fd >= 0) ::close(w.task_fd);
  if (w.result_fd >= 0) ::close(w.result_fd);
  w.task_fd = w.result_fd = -1;
  if (w.pid > 0) {
    int status = 0;
    while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (why != nullptr) *why = describe_status(status);
  }
  w.pid = -1;
}

void WorkerPool::stop() {
  for (Worker& w : workers_) {
    if (w.pid > 0) ::kill(w.pid, SIGKILL);
    reap(w, nullptr);
    w.index = -1;
  }
}

}  // namespace studies
}  // namespace hexi
