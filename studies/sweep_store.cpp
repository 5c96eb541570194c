#include "studies/sweep_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

#include "scenarios/sweep.hpp"
#include "topologies/paths.hpp"

namespace hexi {
inline namespace studies {
namespace {

namespace fs = std::filesystem;

std::string errno_text() {
  return std::strerror(errno);
}

// Makes a new directory entry durable (the file's own fsync does not cover it).
void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// HEXISIM_SWEEP_FAULT (sweep_store.hpp): the row to kill at (0: never) and how.
struct SweepFault {
  int row = 0;
  bool mid_row = false;
};

SweepFault sweep_fault() {
  static const SweepFault fault = [] {
    SweepFault f;
    const char* v = std::getenv("HEXISIM_SWEEP_FAULT");
    if (v == nullptr) return f;
    const std::string text = v;
    for (const char* kind : {"after-row=", "mid-row="}) {
      if (text.rfind(kind, 0) == 0) {
        f.row = std::atoi(text.c_str() + std::strlen(kind));
        f.mid_row = kind[0] == 'm';
      }
    }
    return f;
  }();
  return fault;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string csv_value(const Json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return csv_field(v.get<std::string>());
  return csv_field(dump_json(v));
}

}  // namespace

Result<std::unique_ptr<ResultStore>> ResultStore::open(const fs::path& dir) {
  if (auto st = check_output_folder("--out", dir); !st) return st.error();
  std::unique_ptr<ResultStore> s(new ResultStore());
  s->dir_ = dir;
  s->path_ = dir / "results.jsonl";
  const fs::path lock = dir / ".lock";
  s->lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (s->lock_fd_ < 0) return failure(lock.string() + ": cannot open: " + errno_text());
  if (::flock(s->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return bad_input("--out " + dir.string() +
                     ": another hexisim sweep is writing this folder (it holds " + lock.string() +
                     "); wait for it or choose another --out");
  }
  if (auto st = s->read(); !st) return st.error();
  if (auto st = s->open_for_append(); !st) return st.error();
  return s;
}

ResultStore::~ResultStore() {
  if (fd_ >= 0) ::close(fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void ResultStore::close_in_child() {
  if (fd_ >= 0) ::close(fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
  fd_ = lock_fd_ = -1;
}

Status ResultStore::read() {
  struct stat info {};
  if (::lstat(path_.c_str(), &info) != 0) return {};  // a new sweep
  if (!S_ISREG(info.st_mode)) {
    return bad_input(path_.string() + ": is " +
                     (S_ISLNK(info.st_mode) ? "a link" : "no regular file") +
                     "; a sweep appends its rows to a regular file of its own (a FIFO would "
                     "block the resume, a link send rows elsewhere): move it away");
  }
  std::ifstream in(path_, std::ios::binary);
  if (!in) return failure(path_.string() + ": cannot read: " + errno_text());
  std::ostringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  const std::size_t end = all.rfind('\n') == std::string::npos ? 0 : all.rfind('\n') + 1;
  std::size_t line_no = 0;
  for (std::size_t at = 0; at < end;) {
    const std::size_t nl = all.find('\n', at);
    const std::string line = all.substr(at, nl - at);
    at = nl + 1;
    ++line_no;
    if (line.empty()) continue;
    auto row = parse_json_text(line, path_.string());
    if (!row || !row->is_object() || !row->contains("key") || !(*row)["key"].is_string() ||
        !row->contains("index") || !(*row)["index"].is_number_integer()) {
      return bad_input(path_.string() + ": line " + std::to_string(line_no) +
                       ": expected a sweep result row (a JSON object with \"index\" and "
                       "\"key\"); the file is damaged: move it away to start the sweep over");
    }
    rows_.push_back(std::move(*row));
  }
  if (end < all.size()) {  // a torn last line: the write of its row never finished
    dropped_ = all.substr(end, 60);
    if (auto st = write_file_atomically(path_, std::string_view(all).substr(0, end)); !st) {
      return st;
    }
    fsync_dir(dir_);
  }
  return {};
}

Status ResultStore::open_for_append() {
  if (fd_ >= 0) ::close(fd_);
  std::error_code ec;
  const bool fresh = !fs::exists(path_, ec);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0) return failure(path_.string() + ": cannot open for appending: " + errno_text());
  if (fresh) fsync_dir(dir_);
  return {};
}

Status ResultStore::append(const std::string& row) {
  const std::string line = row + "\n";
  const SweepFault fault = sweep_fault();
  ++appended_;
  const bool kill_now = fault.row == appended_;
  // One write() of the whole line: O_APPEND puts it at the end in one piece. A short
  // write (a full disk) leaves a torn line that the next open() drops.
  ssize_t n = -1;
  const std::size_t length = kill_now && fault.mid_row ? line.size() / 2 : line.size();
  do {
    n = ::write(fd_, line.data(), length);
  } while (n < 0 && errno == EINTR);
  if (kill_now && fault.mid_row) std::raise(SIGKILL);
  if (n != static_cast<ssize_t>(line.size())) {
    return failure(path_.string() +
                   ": cannot append a row: " + (n < 0 ? errno_text() : "short write (disk full?)"));
  }
  if (::fsync(fd_) != 0) return failure(path_.string() + ": fsync failed: " + errno_text());
  if (kill_now) std::raise(SIGKILL);
  return {};
}

Status ResultStore::keep_only(const std::function<bool(const Json&)>& keep) {
  std::vector<Json> kept;
  std::string text;
  for (Json& r : rows_) {
    if (!keep(r)) continue;
    text += dump_json(r) + "\n";
    kept.push_back(std::move(r));
  }
  rows_ = std::move(kept);
  if (auto st = write_file_atomically(path_, text); !st) return st;
  fsync_dir(dir_);
  return open_for_append();  // the rename replaced the file this descriptor pointed at
}

std::string results_csv(const std::vector<Json>& rows, const std::vector<std::string>& metrics) {
  std::vector<const Json*> sorted;
  for (const Json& r : rows) sorted.push_back(&r);
  std::stable_sort(sorted.begin(), sorted.end(), [](const Json* a, const Json* b) {
    return (*a)["index"].get<long long>() < (*b)["index"].get<long long>();
  });
  // The axes the rows have ("prices" only in sweeps that price their points).
  std::vector<const char*> axes;
  for (const char* axis : kSweepAxes) {
    if (std::string_view(axis) != "prices" ||
        std::any_of(rows.begin(), rows.end(), [&](const Json& r) {
          return r.contains("point") && r["point"].contains(axis);
        })) {
      axes.push_back(axis);
    }
  }
  std::vector<std::string> header = {"index"};
  for (const char* axis : axes) header.emplace_back(axis);
  header.emplace_back("status");
  header.insert(header.end(), metrics.begin(), metrics.end());
  for (const char* tail : {"plan_digest", "error", "wall_time_s", "search_time_s"})
    header.emplace_back(tail);
  std::string out;
  for (std::size_t i = 0; i < header.size(); ++i) out += (i ? "," : "") + csv_field(header[i]);
  out += "\n";
  const Json none;
  auto get = [&](const Json& obj, const std::string& k) -> const Json& {
    return obj.is_object() && obj.contains(k) ? obj[k] : none;
  };
  for (const Json* r : sorted) {
    std::vector<std::string> cells = {csv_value((*r)["index"])};
    for (const char* axis : axes) cells.push_back(csv_value(get(get(*r, "point"), axis)));
    const bool failed = r->contains("error");
    cells.emplace_back(failed ? "error" : "ok");
    for (const auto& m : metrics) cells.push_back(csv_value(get(get(*r, "metrics"), m)));
    cells.push_back(csv_value(get(*r, "plan_digest")));
    cells.push_back(csv_value(get(get(*r, "error"), "message")));
    cells.push_back(csv_value(get(*r, "wall_time_s")));
    cells.push_back(csv_value(get(*r, "search_time_s")));
    for (std::size_t i = 0; i < cells.size(); ++i) out += (i ? "," : "") + cells[i];
    out += "\n";
  }
  return out;
}

}  // namespace studies
}  // namespace hexi
