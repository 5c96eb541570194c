#pragma once
// Checkpoint folders on disk (format: engine/checkpoint.hpp), written so that a kill or a
// power loss at any moment leaves the folder holding either the previous complete
// checkpoint or the new one, never a mix:
//   1. every rank writes its device's file to a temporary name, fsyncs it, renames it to
//      device-<d>.step-<n>.<digest>.ckpt and fsyncs the folder. The name carries the
//      file's own digest, so a file the current manifest names is only ever "replaced" by
//      identical bytes;
//   2. when every rank has (train.cpp agrees on it), rank 0 writes manifest.json.tmp,
//      fsyncs it, renames it over manifest.json (the one atomic switch from the old
//      checkpoint to the new) and fsyncs the folder;
//   3. only then rank 0 removes the files the new manifest does not name: the previous
//      checkpoint's and those of interrupted saves.
// The folder must be one folder shared by all ranks (rank 0 writes the manifest that every
// rank reads on resume).

#include <filesystem>
#include <functional>
#include <initializer_list>
#include <span>
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
