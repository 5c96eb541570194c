#pragma once
// The checkpoint format (version 2): what the files say, read and written as text. Pure
// functions (no MPI, no backend, no file system): the loader and the fuzz targets call the
// same parsers. The files themselves, written crash-safely: engine/checkpoint_files.hpp.
//
// DIR/manifest.json names the complete checkpoint:
//   {"format": "hexisim-checkpoint-manifest", "version": 2, "steps": 6, "devices": 3,
//    "files": [{"device": 0, "file": "device-0.step-6.<digest>.ckpt", "bytes": 91234,
//               "fnv1a64": "<digest>"}, ...]}                      // one per device
// Each device file: one JSON header line
//   {"format": "hexisim-checkpoint", "version": 2, "device": 0, "steps": 6,
//    "fingerprint": "...", "params": P, "moments": M}
// then float32 little-endian: P parameters (layout order), M AdamW first moments, M second
// moments (owned runs in order).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "topologies/json_input.hpp"
#include "topologies/status.hpp"

namespace hexi::engine {

inline constexpr int kCheckpointVersion = 2;
inline constexpr std::int64_t kMaxCheckpointSteps = 2147483647;  // 2^31 - 1

// FNV-1a, 64 bits (Fowler, Noll, Vo): a digest that catches truncated, swapped and
// corrupted files (not tampering); the same on every build and machine.
class Fnv1a {
 public:
  void update(const void* data, std::size_t bytes);
  std::uint64_t value() const { return hash_; }
  std::string hex() const;  // 16 lowercase hex digits

 private:
  std::uint64_t hash_ = 14695981039346656037ull;
};

// The first line of a device file.
struct CheckpointHeader {
  int device = 0;
  int steps = 0;             // optimizer steps taken, in [0, 2^31 - 1]
  std::string fingerprint;   // of the device's program and parameter layout (runtime.cpp)
  std::int64_t params = 0;   // float32 elements of the parameter section
  std::int64_t moments = 0;  // float32 elements of each AdamW moment section

  // Bytes of the three sections after the header line and its newline.
  std::uint64_t data_bytes() const;
};

// One device's file as the manifest names it.
struct ManifestFile {
  int device = 0;
  std::string file;  // a plain name inside the checkpoint folder
  std::uint64_t bytes = 0;
  std::string fnv1a64;  // Fnv1a::hex() of the whole file
};

struct CheckpointManifest {
  int steps = 0;
  int devices = 0;                  // devices of the plan; files has one entry per device
  std::vector<ManifestFile> files;  // distinct devices, in the order written
};

// Every bad field gives "<origin>: <json path>: expected ..., got ...".
Result<CheckpointHeader> parse_checkpoint_header(std::string_view text, const std::string& origin);
Result<CheckpointManifest> parse_checkpoint_manifest(std::string_view text,
                                                     const std::string& origin);
// One element of the manifest's "files" (how ranks send their entry to rank 0).
Result<ManifestFile> parse_manifest_file(std::string_view text, const std::string& origin);

// Text the parsers above read back: the header as one line (no newline), the manifest
// indented, an entry as one line.
std::string to_text(const CheckpointHeader& header);
std::string to_text(const CheckpointManifest& manifest);
std::string to_text(const ManifestFile& file);

}  // namespace hexi::engine
