// Where unit tests find shared test data (models, references, vocabularies).
#pragma once

#include <string>

namespace loom::test {

/// Absolute path of `rel` inside the shared/ folder (LOOM_SHARED_DIR at build time).
inline std::string shared_path(const std::string& rel) { return std::string(LOOM_SHARED_DIR) + "/" + rel; }

}  // namespace loom::test
