#include "topologies/paths.hpp"

#include <cstdlib>

#ifndef HEXISIM_SOURCE_ROOT
#error "HEXISIM_SOURCE_ROOT must be defined by the build"
#endif

namespace hexi {

std::filesystem::path data_root() {
  if (const char* env = std::getenv("HEXISIM_ROOT"); env != nullptr && *env != '\0') return env;
  return HEXISIM_SOURCE_ROOT;
}

}  // namespace hexi
