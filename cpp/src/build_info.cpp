// Facts about this build for attnkit.show_config(); the values come from CMake compile definitions.
#include <map>
#include <string>

namespace attnkit {

std::map<std::string, std::string> build_info() {
  std::map<std::string, std::string> info;
  info["version"] = ATTNKIT_VERSION;
  info["compiler"] = ATTNKIT_COMPILER;
#if defined(ATTNKIT_FLAGS_BASELINE)
  info["flags_baseline"] = ATTNKIT_FLAGS_BASELINE;
#endif
#if defined(ATTNKIT_FLAGS_AVX2)
  info["flags_avx2"] = ATTNKIT_FLAGS_AVX2;
#endif
#if defined(ATTNKIT_FLAGS_AVX512)
  info["flags_avx512"] = ATTNKIT_FLAGS_AVX512;
#endif
  info["openmp"] = std::to_string(_OPENMP);
  info["sanitize"] = ATTNKIT_SANITIZE;
  return info;
}

}  // namespace attnkit
