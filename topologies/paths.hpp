#pragma once
// Where shipped data lives: the GPU catalog, clusters, models and scenarios.
// $HEXISIM_ROOT overrides the source tree compiled in at configure time.

#include <filesystem>

namespace hexi {

std::filesystem::path data_root();

}  // namespace hexi
