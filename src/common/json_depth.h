// How deep JSON from outside may nest. nlohmann::json parses iteratively, but copying, comparing and dumping
// a value recurse once per level: a small body of nested brackets would exhaust a thread's stack. Every
// edge that parses JSON it did not write (the extender's request bodies, the API server's answers and watch
// lines, the annotation codecs) checks the depth first. Kubernetes objects nest a few tens of levels.
#pragma once

#include <string_view>

namespace mgpu {

inline constexpr int kMaxJsonDepth = 256;

// Whether the arrays and objects of `text` nest at most `max_depth` deep; brackets inside strings do not
// count. `text` need not be valid JSON (the parser says what else is wrong).
bool JsonDepthWithin(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace mgpu
