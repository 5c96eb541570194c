#pragma once
// Where shipped data lives (the GPU catalog, clusters, models and scenarios), and the
// rules every output file follows.

#include <filesystem>
#include <string_view>
#include <vector>

#include "topologies/status.hpp"

namespace hexi {

// The folder holding topologies/, scenarios/ and engine/corpus/: $HEXISIM_ROOT when set;
// else <executable's folder>/../share/hexisim when that holds the data (an installed
// tree, `cmake --install`); else the source tree compiled in at configure time.
std::filesystem::path data_root();

// Checked before any work (a run may take hours): `path` can be written as an output
// file (not a folder; its folder passes check_output_folder) and is none
// of `inputs` (the same file by any path or link: `plan s.json --out s.json` would
// destroy the scenario). Bad input naming `flag` otherwise.
Status check_output_file(std::string_view flag, const std::filesystem::path& path,
                         const std::vector<std::filesystem::path>& inputs);

// An output folder (`--save`): it exists or is created now, and a file can be created in
// it (a probe file, removed again: access() would say yes to root on a folder it cannot
// write, e.g. /proc/x). Bad input naming `flag` otherwise.
Status check_output_folder(std::string_view flag, const std::filesystem::path& dir);

// A new file of this process under an unpredictable name in `dir`: `prefix` and 12 random
// characters, created with O_CREAT|O_EXCL|O_NOFOLLOW (never an existing file, nor a link
// planted under the name), with `mode` less the umask, open for writing. The caller closes fd.
struct TemporaryFile {
  int fd = -1;
  std::filesystem::path path;
};
Result<TemporaryFile> create_temporary(const std::filesystem::path& dir, std::string_view prefix,
                                       unsigned mode = 0600);

// Writes `text` to the output `path`, by what is there:
//   - nothing, or a regular file: through a temporary file (create_temporary) in the same
//     folder, flushed to disk and renamed over `path`: a reader, or a run killed mid-write,
//     sees the old file or the new one, never a part. A replaced file keeps its mode (and,
//     written by root, its owner). Creates missing parent folders. Sets *replaced when a
//     file was there;
//   - a character device or a FIFO (`--out /dev/null`, a pipe): written in place, never
//     replaced by a regular file;
//   - a symbolic link: the file it leads to, by these same rules (the link stays);
//   - a folder, a block device, a socket, a dangling link: refused (bad input).
Status write_file_atomically(const std::filesystem::path& path, std::string_view text,
                             bool* replaced = nullptr);

}  // namespace hexi
