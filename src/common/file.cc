#include "common/file.h"

#include <fstream>
#include <sstream>

namespace mgpu {

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{"cannot read " + path};
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace mgpu
