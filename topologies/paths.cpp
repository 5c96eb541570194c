#include "topologies/paths.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>

#ifndef HEXISIM_SOURCE_ROOT
#error "HEXISIM_SOURCE_ROOT must be defined by the build"
#endif

namespace hexi {
namespace fs = std::filesystem;

namespace {

// The installed layout: <prefix>/bin/hexisim and <prefix>/share/hexisim/<data>.
fs::path installed_root() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  fs::path share = exe.parent_path().parent_path() / "share" / "hexisim";
  return fs::exists(share / "topologies" / "gpus.json", ec) ? share : fs::path();
}

// The same file as `a`, by any path or link (b need not exist).
bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

// Messages start with the flag and the path it was given.
std::string named(std::string_view flag, const fs::path& path) {
  return std::string(flag) + " " + path.string() + ": ";
}

// `dir` exists or can be created, and a file can be created in it.
Status probe_folder(const fs::path& dir, const std::string& who, const std::string& which) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) {
    return bad_input(who + "cannot create " + which + (ec ? ": " + ec.message() : std::string()));
  }
  const fs::path probe = dir / (".hexisim-write-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return bad_input(who + "cannot write in " + which + ": " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return {};
}

}  // namespace

fs::path data_root() {
  if (const char* env = std::getenv("HEXISIM_ROOT"); env != nullptr && *env != '\0') return env;
  static const fs::path installed = installed_root();
  if (!installed.empty()) return installed;
  return HEXISIM_SOURCE_ROOT;
}

Status check_output_folder(std::string_view flag, const fs::path& dir) {
  return probe_folder(dir, named(flag, dir), "the folder");
}

Status check_output_file(std::string_view flag, const fs::path& path,
                         const std::vector<fs::path>& inputs) {
  if (path.empty()) return bad_input(std::string(flag) + ": expected a file path, got \"\"");
  const std::string who = named(flag, path);
  for (const fs::path& input : inputs) {
    if (!input.empty() && same_file(path, input)) {
      return bad_input(who + "is an input of this command (" + input.string() +
                       "); refusing to overwrite it");
    }
  }
  std::error_code ec;
  if (fs::is_directory(path, ec)) return bad_input(who + "is a folder, expected a file path");
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0) {
    return bad_input(who + "exists and cannot be overwritten: " + std::strerror(errno));
  }
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  return probe_folder(dir, who, "the folder " + dir.string());
}

Status write_file_atomically(const fs::path& path, std::string_view text, bool* replaced) {
  std::error_code ec;
  if (replaced != nullptr) *replaced = fs::exists(path, ec);
  const fs::path parent = path.parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) return failure(path.string() + ": cannot create its folder: " + ec.message());
  const fs::path tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return failure(path.string() + ": cannot open for writing: " + std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  const bool ok = done == text.size() && ::fsync(fd) == 0;
  const int saved = errno;
  if (::close(fd) != 0 || !ok) {
    fs::remove(tmp, ec);
    return failure(path.string() + ": write failed: " + std::strerror(saved));
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    return failure(path.string() + ": cannot replace: " + why);
  }
  return {};
}

}  // namespace hexi
