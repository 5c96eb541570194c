#include "engine/watchdog.hpp"

#include <chrono>
#include <sstream>

namespace hexi::engine {

Result<Fault> Fault::parse(const std::string& spec) {
  Fault f;
  if (spec.empty()) return f;
  auto bad = [&](const std::string& why) {
    return bad_input("HEXISIM_FAULT=\"" + spec + "\": " + why +
                     " (expected rank=R,step=S,op=I,mode=error|crash|hang or "
                     "rank=R,mode=kill-in-save,point=K)");
  };
  std::stringstream in(spec);
  std::string item;
  bool have_mode = false, have_rank = false;
  while (std::getline(in, item, ',')) {
    auto eq = item.find('=');
    if (eq == std::string::npos) return bad("\"" + item + "\" is not key=value");
    std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "mode") {
      have_mode = true;
      if (value == "error") {
        f.mode = Mode::kError;
      } else if (value == "crash") {
        f.mode = Mode::kCrash;
      } else if (value == "hang") {
        f.mode = Mode::kHang;
      } else if (value == "kill-in-save") {
        f.mode = Mode::kKillInSave;
      } else {
        return bad("unknown mode \"" + value + "\"");
      }
      continue;
    }
    int number = 0;
    try {
      number = std::stoi(value);
    } catch (const std::exception&) {
      return bad("\"" + value + "\" is not an integer");
    }
    if (key == "rank") {
      f.rank = number;
      have_rank = true;
    } else if (key == "step") {
      f.step = number;
    } else if (key == "op") {
      f.op = number;
    } else if (key == "point") {
      f.point = number;
    } else {
      return bad("unknown key \"" + key + "\"");
    }
  }
  if (!have_mode || !have_rank) return bad("rank and mode are required");
  return f;
}

void Progress::enter(std::function<std::string()> what, bool communicating) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    what_ = std::move(what);
  }
  communicating_.store(communicating, std::memory_order_relaxed);
  ticks_.fetch_add(1, std::memory_order_relaxed);
}

std::string Progress::describe() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return what_ ? what_() : std::string("starting up");
}

Watchdog::Watchdog(const Progress& progress, double timeout_s, double comm_grace_s,
                   Handler on_timeout)
    : progress_(progress),
      timeout_s_(timeout_s),
      grace_s_(comm_grace_s),
      handler_(std::move(on_timeout)) {
  if (timeout_s_ > 0) thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::loop() {
  using Clock = std::chrono::steady_clock;
  std::uint64_t seen = progress_.ticks();
  auto since = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    stop_cv_.wait_for(lock, std::chrono::milliseconds(200));
    if (stop_) break;
    const std::uint64_t now_ticks = progress_.ticks();
    if (now_ticks != seen) {
      seen = now_ticks;
      since = Clock::now();
      continue;
    }
    const double idle = std::chrono::duration<double>(Clock::now() - since).count();
    const double limit = timeout_s_ + (progress_.communicating() ? grace_s_ : 0.0);
    if (idle >= limit) {
      std::ostringstream msg;
      msg.precision(3);
      msg << "no progress for " << idle << " s (watchdog limit " << timeout_s_
          << " s, --watchdog) in " << progress_.describe();
      lock.unlock();
      handler_(msg.str());
      return;
    }
  }
}

}  // namespace hexi::engine
