#pragma once
// Checkpoint folders on disk (format: engine/checkpoint.hpp), written so that a kill or a
// power loss at any moment leaves the folder holding either the previous complete
// checkpoint or the new one, never a mix:
//   1. every rank writes its device's file to a temporary name (unpredictable, created
//      never over an existing file or link: create_temporary), fsyncs it, renames it to
//      device-<d>.step-<n>.<digest>.ckpt and fsyncs the folder. The name carries the
//      file's own digest, so a file the current manifest names is only ever "replaced" by
//      identical bytes;
//   2. when every rank has (train.cpp agrees on it), rank 0 writes manifest.json.tmp-*,
//      fsyncs it, renames it over manifest.json (the one atomic switch from the old
//      checkpoint to the new) and fsyncs the folder;
//   3. only then rank 0 removes the files the new manifest does not name: the previous
//      checkpoint's and those of interrupted saves.
// The folder must be one folder shared by all ranks (rank 0 writes the manifest that every
// rank reads on resume). One job at a time writes it: CheckpointLock.

#include <filesystem>
#include <functional>
#include <initializer_list>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/checkpoint.hpp"

namespace hexi::engine {

// Called while a checkpoint is read or written (every step, MiB read, 64 MiB written), so that a
// rank's watchdog (engine/watchdog.hpp) sees a large checkpoint progressing.
using Alive = std::function<void()>;

// The durable steps of a save (each write, fsync, rename, removal), counted so that a test
// can kill the process right after the n-th (HEXISIM_FAULT=rank=R,mode=kill-in-save,point=n).
class SavePoints {
 public:
  explicit SavePoints(int kill_after = 0, Alive alive = {})  // kill_after 0: never
      : kill_after_(kill_after), alive_(std::move(alive)) {}
  // One more step is done; raises SIGKILL when it is the kill_after-th.
  void passed();
  void alive() const {
    if (alive_) alive_();
  }

 private:
  int passed_ = 0;
  int kill_after_ = 0;
  Alive alive_;
};

std::filesystem::path manifest_path(const std::filesystem::path& dir);

// A hold on a checkpoint folder for the life of the object (flock on DIR/.hexisim-lock,
// released when the process ends, however it ends): exclusive for a folder a job saves to,
// shared for one it only resumes from. A second job saving to the folder, or saving to one
// another job resumes from, would delete the other's files (step 3) or mix two saves: it
// is refused up front, never waits.
class CheckpointLock {
 public:
  CheckpointLock() = default;
  CheckpointLock(CheckpointLock&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), exclusive_(other.exclusive_) {}
  CheckpointLock& operator=(CheckpointLock&& other) noexcept;
  CheckpointLock(const CheckpointLock&) = delete;
  CheckpointLock& operator=(const CheckpointLock&) = delete;
  ~CheckpointLock();

  // Bad input naming `flag`, the folder and the holder (its pid, when it saves) when
  // another job holds the folder in a conflicting way. A shared hold on a folder this
  // process cannot write (a read-only checkpoint) is no hold: nobody saves there.
  static Result<CheckpointLock> take(std::string_view flag, const std::filesystem::path& dir,
                                     bool exclusive);

 private:
  CheckpointLock(int fd, bool exclusive) : fd_(fd), exclusive_(exclusive) {}
  int fd_ = -1;
  bool exclusive_ = false;
};

// Step 1 for one device: the header line, then `sections` (float32). Returns the file's
// manifest entry.
Result<ManifestFile> write_device_file(const std::filesystem::path& dir,
                                       const CheckpointHeader& header,
                                       std::initializer_list<std::span<const float>> sections,
                                       SavePoints& points);

// Steps 2 and 3 (rank 0, once every file of `manifest` is durable).
Status publish_manifest(const std::filesystem::path& dir, const CheckpointManifest& manifest,
                        SavePoints& points);

// DIR/manifest.json; bad input when absent (no complete checkpoint) or invalid.
Result<CheckpointManifest> read_manifest(const std::filesystem::path& dir);

// One device's data, checked against the manifest before anything is trusted: the file's
// size and digest, then its header's device and step.
struct DeviceCheckpoint {
  std::filesystem::path file;
  CheckpointHeader header;
  std::vector<float> params, moment1, moment2;
};
Result<DeviceCheckpoint> read_device_file(const std::filesystem::path& dir,
                                          const CheckpointManifest& manifest, int device,
                                          const Alive& alive = {});

}  // namespace hexi::engine
