#include "engine/checkpoint_files.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "engine/check.hpp"
#include "topologies/paths.hpp"

namespace hexi::engine {

namespace fs = std::filesystem;

void SavePoints::passed() {
  alive();
  if (++passed_ != kill_after_) return;
  std::fflush(nullptr);
  std::raise(SIGKILL);
}

fs::path manifest_path(const fs::path& dir) {
  return dir / "manifest.json";
}

namespace {

// Temporaries are these prefixes and a random suffix (create_temporary).
constexpr const char* kManifestTemp = "manifest.json.tmp-";
constexpr std::size_t kMaxHeaderBytes = 1 << 16;  // a header line is ~200 bytes
constexpr std::uintmax_t kMaxManifestBytes = std::uintmax_t{1} << 28;
constexpr std::size_t kChunk = std::size_t{1} << 26;       // 64 MiB written between signs of life
constexpr std::size_t kReadBuffer = std::size_t{1} << 20;  // 1 MiB read between them

using Bytes = std::span<const std::byte>;

std::string errno_text() {
  return std::strerror(errno);
}

Status write_all(int fd, const fs::path& path, Bytes data, const SavePoints& points) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), std::min(data.size(), kChunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return failure(path.string() + ": write failed: " + errno_text());
    data = data.subspan(static_cast<std::size_t>(n));
    points.alive();
  }
  return {};
}

// What write_synced wrote: its size and digest.
struct Written {
  std::uint64_t bytes = 0;
  Fnv1a digest;
};

// Creates a new temporary file in `dir` (create_temporary: an unpredictable name starting
// with `prefix`), writes `pieces`, fsyncs and closes it: a save point after each piece and
// after the fsync. Returns its name with its size and digest.
struct Temporary {
  fs::path path;
  Written written;
};
Result<Temporary> write_synced(const fs::path& dir, const std::string& prefix,
                               const std::vector<Bytes>& pieces, SavePoints& points) {
  auto file = create_temporary(dir, prefix, 0644);
  if (!file.ok()) return failure(dir.string() + ": cannot create a file: " + file.error().message);
  const int fd = file->fd;
  const fs::path& path = file->path;
  Temporary t{path, {}};
  Status s;
  for (Bytes piece : pieces) {
    s = write_all(fd, path, piece, points);
    if (!s.ok()) break;
    t.written.digest.update(piece.data(), piece.size());
    t.written.bytes += piece.size();
    points.passed();
  }
  if (s.ok() && ::fsync(fd) != 0) s = failure(path.string() + ": fsync failed: " + errno_text());
  if (::close(fd) != 0 && s.ok()) s = failure(path.string() + ": close failed: " + errno_text());
  if (!s.ok()) ::unlink(path.c_str());
  HEXI_TRY(s);
  points.passed();
  return t;
}

// Makes the folder's entries (a rename) durable.
Status sync_folder(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return failure(dir.string() + ": cannot open the folder to fsync it: " + errno_text());
  const bool synced = ::fsync(fd) == 0;
  const std::string why = synced ? "" : errno_text();
  ::close(fd);
  if (!synced) return failure(dir.string() + ": fsync of the folder failed: " + why);
  return {};
}

// Atomically replaces `to` with `from` (both in `dir`), then makes that durable.
Status rename_synced(const fs::path& from, const fs::path& to, const fs::path& dir,
                     SavePoints& points) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    return failure(from.string() + ": cannot rename to " + to.string() + ": " + errno_text());
  }
  points.passed();
  HEXI_TRY(sync_folder(dir));
  points.passed();
  return {};
}

// Files this code writes (device files, their temporaries, the manifest's temporary) that
// `manifest` does not name: the previous checkpoint's and those of interrupted saves.
bool stale(const std::string& name, const CheckpointManifest& manifest) {
  const bool ours = name.starts_with("manifest.json.tmp") ||
                    (name.starts_with("device-") &&
                     (name.ends_with(".ckpt") || name.find(".ckpt.tmp") != std::string::npos));
  return ours && std::none_of(manifest.files.begin(), manifest.files.end(),
                              [&](const ManifestFile& f) { return f.file == name; });
}

Status remove_stale(const fs::path& dir, const CheckpointManifest& manifest, SavePoints& points) {
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;  // an entry that vanished meanwhile is not ours to remove
    if (it->is_regular_file(type_ec) && stale(it->path().filename().string(), manifest))
      doomed.push_back(it->path());
  }
  if (ec) return failure(dir.string() + ": cannot list the checkpoint folder: " + ec.message());
  std::sort(doomed.begin(), doomed.end());  // the same save points on every run
  for (const auto& path : doomed) {
    if (!fs::remove(path, ec) && ec) {
      return failure(path.string() + ": the new checkpoint is complete, but this file of an " +
                     "earlier one cannot be removed: " + ec.message());
    }
    points.passed();
  }
  return {};
}

// The whole of a regular file of at most `limit` bytes (never blocks on a FIFO).
Result<std::string> read_small_file(const fs::path& path, std::uintmax_t limit) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return bad_input("not found or not a regular file");
  const auto size = fs::file_size(path, ec);
  if (ec || size > limit) return bad_input("larger than " + std::to_string(limit) + " bytes");
  std::string text(size, '\0');
  std::ifstream in(path, std::ios::binary);
  if (!in.read(text.data(), static_cast<std::streamsize>(size))) return bad_input("cannot read");
  return text;
}

// `path` is the file `entry` names: the same size and digest.
Status check_file(const fs::path& path, const ManifestFile& entry, const std::string& manifest,
                  const Alive& alive) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    return bad_input(path.string() + ": missing (named by " + manifest + ")");
  const auto size = fs::file_size(path, ec);
  if (ec || size != entry.bytes) {
    return bad_input(path.string() + ": " + std::to_string(size) + " bytes, but " + manifest +
                     " says " + std::to_string(entry.bytes) + " (truncated or replaced)");
  }
  std::ifstream in(path, std::ios::binary);
  Fnv1a digest;
  std::vector<char> buf(std::clamp<std::uintmax_t>(size, 1, kReadBuffer));
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
    digest.update(buf.data(), static_cast<std::size_t>(in.gcount()));
    if (alive) alive();
  }
  if (in.bad()) return failure(path.string() + ": read failed");
  if (digest.hex() != entry.fnv1a64) {
    return bad_input(path.string() + ": FNV-1a digest " + digest.hex() + ", but " + manifest +
                     " says " + entry.fnv1a64 + " (the file is corrupt)");
  }
  return {};
}

// The header line of an open device file; leaves `in` at the first section.
Result<std::string> header_line(std::ifstream& in, const fs::path& path) {
  std::string head(kMaxHeaderBytes, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  const auto end = head.find('\n');
  if (end == std::string::npos || end >= static_cast<std::size_t>(in.gcount()))
    return bad_input(path.string() + ": no header line (not a hexisim checkpoint)");
  in.clear();
  in.seekg(static_cast<std::streamoff>(end + 1));
  head.resize(end);
  return head;
}

// The header agrees with the manifest that named its file.
Status check_header(const CheckpointHeader& h, std::size_t line_bytes, const ManifestFile& entry,
                    const CheckpointManifest& manifest, const fs::path& path,
                    const std::string& where) {
  if (h.device != entry.device) {
    return bad_input(path.string() + ": holds device " + std::to_string(h.device) + ", but " +
                     where + " lists it for device " + std::to_string(entry.device));
  }
  if (h.steps != manifest.steps) {
    return bad_input(path.string() + ": a checkpoint of step " + std::to_string(h.steps) +
                     ", but " + where + " is of step " + std::to_string(manifest.steps) +
                     " (files of different saves)");
  }
  if (line_bytes + 1 + h.data_bytes() != entry.bytes) {
    return bad_input(path.string() + ": the header's element counts (params " +
                     std::to_string(h.params) + ", moments " + std::to_string(h.moments) +
                     ") do not match the file's size");
  }
  return {};
}

Status read_section(std::ifstream& in, std::vector<float>& out, std::int64_t count,
                    const fs::path& path) {
  out.resize(static_cast<std::size_t>(count));
  in.read(reinterpret_cast<char*>(out.data()),
          static_cast<std::streamsize>(out.size() * sizeof(float)));
  if (!in) return failure(path.string() + ": read failed");
  return {};
}

}  // namespace

CheckpointLock& CheckpointLock::operator=(CheckpointLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    exclusive_ = other.exclusive_;
  }
  return *this;
}

CheckpointLock::~CheckpointLock() {
  if (fd_ < 0) return;
  if (exclusive_) (void)::ftruncate(fd_, 0);  // no pid of a job that has ended
  ::close(fd_);
}

Result<CheckpointLock> CheckpointLock::take(std::string_view flag, const fs::path& dir,
                                            bool exclusive) {
  const fs::path path = dir / ".hexisim-lock";
  const std::string who = std::string(flag) + " " + dir.string() + ": ";
  std::error_code ec;
  if (!exclusive && !fs::is_directory(dir, ec)) return CheckpointLock();  // the reader says why
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0 && !exclusive && (errno == EACCES || errno == EROFS || errno == EPERM)) {
    fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return CheckpointLock();
  }
  if (fd < 0) return bad_input(who + "cannot open its lock file .hexisim-lock: " + errno_text());
  CheckpointLock lock(fd, false);  // exclusive once held: only then its pid is ours to clear
  if (::flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return failure(who + "cannot lock the folder: " + errno_text());
    char pid[32] = {};
    const ssize_t n = ::pread(fd, pid, sizeof pid - 1, 0);
    const std::string holder =
        n > 0 ? "hexisim train, pid " + std::string(pid, static_cast<std::size_t>(n))
              : "a job resuming from it";
    return bad_input(who + "another job is using this checkpoint folder (" + holder +
                     "); two jobs on one folder would delete or mix each other's "
                     "checkpoints: wait for it to end, or give another folder");
  }
  if (exclusive) {
    lock.exclusive_ = true;
    const std::string pid = std::to_string(::getpid());
    if (::ftruncate(fd, 0) != 0 ||
        ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
      return failure(who + "cannot write its lock file .hexisim-lock: " + errno_text());
    }
  }
  return lock;
}

Result<ManifestFile> write_device_file(const fs::path& dir, const CheckpointHeader& header,
                                       std::initializer_list<std::span<const float>> sections,
                                       SavePoints& points) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return failure(dir.string() + ": cannot create the checkpoint folder: " + ec.message());
  const std::string stem =
      "device-" + std::to_string(header.device) + ".step-" + std::to_string(header.steps);
  const std::string line = to_text(header) + "\n";
  std::vector<Bytes> pieces = {std::as_bytes(std::span(line))};
  for (auto s : sections) pieces.push_back(std::as_bytes(s));
  auto temp = write_synced(dir, stem + ".ckpt.tmp-", pieces, points);
  HEXI_TRY(temp);
  const Written& w = temp->written;
  ManifestFile entry{header.device, stem + "." + w.digest.hex() + ".ckpt", w.bytes, w.digest.hex()};
  HEXI_TRY(rename_synced(temp->path, dir / entry.file, dir, points));
  return entry;
}

Status publish_manifest(const fs::path& dir, const CheckpointManifest& manifest,
                        SavePoints& points) {
  const std::string text = to_text(manifest);
  auto temp = write_synced(dir, kManifestTemp, {std::as_bytes(std::span(text))}, points);
  HEXI_TRY(temp);
  HEXI_TRY(rename_synced(temp->path, manifest_path(dir), dir, points));
  return remove_stale(dir, manifest, points);
}

Result<CheckpointManifest> read_manifest(const fs::path& dir) {
  const fs::path path = manifest_path(dir);
  auto text = read_small_file(path, kMaxManifestBytes);
  if (!text.ok()) {
    return bad_input(path.string() + ": " + text.error().message + ": " + dir.string() +
                     " holds no complete checkpoint (one is complete once its manifest is "
                     "written)");
  }
  return parse_checkpoint_manifest(*text, path.string());
}

Result<DeviceCheckpoint> read_device_file(const fs::path& dir, const CheckpointManifest& manifest,
                                          int device, const Alive& alive) {
  const std::string where = manifest_path(dir).string();
  auto entry = std::find_if(manifest.files.begin(), manifest.files.end(),
                            [&](const ManifestFile& f) { return f.device == device; });
  if (entry == manifest.files.end())
    return bad_input(where + ": names no file for device " + std::to_string(device));
  const fs::path path = dir / entry->file;
  HEXI_TRY(check_file(path, *entry, where, alive));
  std::ifstream in(path, std::ios::binary);
  auto line = header_line(in, path);
  HEXI_TRY(line);
  auto header = parse_checkpoint_header(*line, path.string());
  HEXI_TRY(header);
  HEXI_TRY(check_header(*header, line->size(), *entry, manifest, path, where));
  DeviceCheckpoint c{path, *header, {}, {}, {}};
  HEXI_TRY(read_section(in, c.params, header->params, path));
  HEXI_TRY(read_section(in, c.moment1, header->moments, path));
  HEXI_TRY(read_section(in, c.moment2, header->moments, path));
  return c;
}

}  // namespace hexi::engine
