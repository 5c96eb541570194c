#include "topologies/text.hpp"

#include <sstream>

namespace hexi {

std::string fixed(double value, int decimals) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(decimals);
  out << value;
  return out.str();
}

}  // namespace hexi
