#include "topologies/paths.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
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
  auto probe = create_temporary(dir, ".hexisim-write-probe-");
  if (!probe) return bad_input(who + "cannot write in " + which + ": " + probe.error().message);
  ::close(probe->fd);
  ::unlink(probe->path.c_str());
  return {};
}

// What an output path leads to, links followed (at most 40, as the kernel does).
struct OutputTarget {
  fs::path path;        // the path written: `path` itself, or where its links lead
  bool exists = false;  // false: a new file is created at `path`
  struct stat st {};    // when it exists
};

Result<OutputTarget> output_target(const fs::path& path) {
  OutputTarget t{path};
  for (int links = 0; links <= 40; ++links) {
    if (::lstat(t.path.c_str(), &t.st) != 0) {
      if (errno != ENOENT && errno != ENOTDIR) {
        return failure(t.path.string() + ": " + std::strerror(errno));
      }
      if (t.path != path) {
        return bad_input(path.string() + ": is a link to " + t.path.string() +
                         ", which does not exist");
      }
      return t;
    }
    t.exists = true;
    if (!S_ISLNK(t.st.st_mode)) return t;
    std::error_code ec;
    const fs::path to = fs::read_symlink(t.path, ec);
    if (ec) return failure(t.path.string() + ": cannot read the link: " + ec.message());
    t.path = to.is_absolute() ? to : t.path.parent_path() / to;
  }
  return bad_input(path.string() + ": too many levels of links");
}

// Why `t` is no output file, or "" when it is one: a new or regular file, a character
// device or a FIFO.
std::string not_an_output(const OutputTarget& t) {
  if (!t.exists) return "";
  const mode_t m = t.st.st_mode;
  if (S_ISREG(m) || S_ISCHR(m) || S_ISFIFO(m)) return "";
  if (S_ISDIR(m)) return "is a folder, expected a file path";
  if (S_ISBLK(m)) return "is a block device; refusing to write to it";
  if (S_ISSOCK(m)) return "is a socket, expected a file path";
  return "is not a regular file, character device or FIFO";
}

// The whole of `text` to `fd`; false with errno set on a failed write.
bool write_all(int fd, std::string_view text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) {
      errno = EIO;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// A character device or a FIFO, written in place (opening a FIFO waits for its reader).
Status write_in_place(const fs::path& shown, const fs::path& path, std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return failure(shown.string() + ": cannot open for writing: " + std::strerror(errno));
  const bool ok = write_all(fd, text);
  const int saved = errno;
  if (::close(fd) != 0 || !ok) {
    return failure(shown.string() + ": write failed: " + std::strerror(ok ? errno : saved));
  }
  return {};
}

// A new file, or one replacing the regular file `t` (keeping its mode, and its owner when
// root writes): a temporary in the same folder, made durable, renamed over it.
Status replace_file(const fs::path& shown, const OutputTarget& t, std::string_view text) {
  std::error_code ec;
  const fs::path parent = t.path.parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) return failure(shown.string() + ": cannot create its folder: " + ec.message());
  auto tmp = create_temporary(parent.empty() ? fs::path(".") : parent,
                              "." + t.path.filename().string() + ".tmp-", 0644);
  if (!tmp) return failure(shown.string() + ": cannot open for writing: " + tmp.error().message);
  bool ok = write_all(tmp->fd, text);
  if (ok && t.exists) {
    ok = ::fchmod(tmp->fd, t.st.st_mode & 07777) == 0;
    if (ok && ::geteuid() == 0) ok = ::fchown(tmp->fd, t.st.st_uid, t.st.st_gid) == 0;
  }
  ok = ok && ::fsync(tmp->fd) == 0;
  const int saved = errno;
  if (::close(tmp->fd) != 0 || !ok) {
    ::unlink(tmp->path.c_str());
    return failure(shown.string() + ": write failed: " + std::strerror(ok ? errno : saved));
  }
  if (::rename(tmp->path.c_str(), t.path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp->path.c_str());
    return failure(shown.string() + ": cannot replace: " + why);
  }
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
  auto target = output_target(path);
  if (!target) return bad_input(std::string(flag) + " " + target.error().message);
  if (const std::string why = not_an_output(*target); !why.empty()) return bad_input(who + why);
  if (target->exists && ::access(target->path.c_str(), W_OK) != 0) {
    return bad_input(who + "exists and cannot be overwritten: " + std::strerror(errno));
  }
  if (target->exists && !S_ISREG(target->st.st_mode)) return {};  // written in place
  const fs::path dir = target->path.has_parent_path() ? target->path.parent_path() : fs::path(".");
  return probe_folder(dir, who, "the folder " + dir.string());
}

Result<TemporaryFile> create_temporary(const fs::path& dir, std::string_view prefix,
                                       unsigned mode) {
  static constexpr char kLetters[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  for (int attempt = 0; attempt < 100; ++attempt) {
    unsigned char random[12];
    if (::getrandom(random, sizeof random, 0) != static_cast<ssize_t>(sizeof random)) {
      return failure(std::string("no random bytes for a temporary name: ") + std::strerror(errno));
    }
    std::string name(prefix);
    for (unsigned char r : random) name += kLetters[r % (sizeof kLetters - 1)];
    TemporaryFile t{-1, dir / name};
    t.fd = ::open(t.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (t.fd >= 0) return t;
    if (errno != EEXIST) return failure(t.path.string() + ": " + std::strerror(errno));
  }
  return failure(dir.string() + ": no free temporary name after 100 tries");
}

Status write_file_atomically(const fs::path& path, std::string_view text, bool* replaced) {
  if (replaced != nullptr) *replaced = false;
  auto target = output_target(path);
  if (!target) return target.error();
  if (const std::string why = not_an_output(*target); !why.empty()) {
    return bad_input(path.string() + ": " + why);
  }
  if (target->exists && !S_ISREG(target->st.st_mode))
    return write_in_place(path, target->path, text);
  if (auto st = replace_file(path, *target, text); !st) return st;
  if (replaced != nullptr) *replaced = target->exists;
  return {};
}

}  // namespace hexi
