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

// The nearest folder of `path` that exists ("." for a bare relative name).
fs::path existing_ancestor(const fs::path& path) {
  fs::path p = fs::absolute(path).parent_path();
  std::error_code ec;
  while (!p.empty() && !fs::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  return p;
}

}  // namespace

fs::path data_root() {
  if (const char* env = std::getenv("HEXISIM_ROOT"); env != nullptr && *env != '\0') return env;
  static const fs::path installed = installed_root();
  if (!installed.empty()) return installed;
  return HEXISIM_SOURCE_ROOT;
}

Status check_output_file(std::string_view flag, const fs::path& path,
                         const std::vector<fs::path>& inputs) {
  const std::string where = std::string(flag) + " " + path.string() + ": ";
  if (path.empty()) return bad_input(std::string(flag) + ": expected a file path, got \"\"");
  for (const fs::path& input : inputs) {
    if (!input.empty() && same_file(path, input)) {
      return bad_input(where + "is an input of this command (" + input.string() +
                       "); refusing to overwrite it");
    }
  }
  std::error_code ec;
  if (fs::is_directory(path, ec)) return bad_input(where + "is a folder, expected a file path");
  if (fs::exists(path, ec)) {
    if (::access(path.c_str(), W_OK) != 0) return bad_input(where + "exists and is not writable");
    return {};
  }
  const fs::path folder = existing_ancestor(path);
  if (!fs::is_directory(folder, ec)) {
    return bad_input(where + folder.string() + " is not a folder");
  }
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    return bad_input(where + "cannot create files in " + folder.string() + " (" +
                     std::strerror(errno) + ")");
  }
  return {};
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
